"""kvshare.vllm.layout -- how a vLLM block is stored in kvshare, and which part
of it a rank holds (docs/vllm.md, "One stored block serves every TP degree").

A stored block is one vLLM block (block_size tokens) of the whole model.  Its
shards are the model's KV heads, shard h for head h (layout version 2; version
1 cut one shard per (layer, head)), each a tensor per layer, in the model's
layer order: the K rows then the V rows of head h of that layer for the
block's tokens, 2 * block_size * head_dim elements, exactly what vLLM's CPU KV
cache holds contiguous for one (block, head) of a layer, (num_blocks,
heads_of_rank, block_size, 2 * head_dim).  The library moves a shard's tensors
in one vector of copies, each from its own address, so a shard costs the
store's fixed per-shard work once for all layers (docs/vllm.md, "Why a shard
per head").

So the heads a rank holds are whole shards whatever the tensor-parallel degree:
rank r of a TP=t engine loads and dumps the shards of its heads, the ranks of
one engine complete a stored block together (a block is written once every
shard of it is in the shared cache, from any rank: docs/store.md, "Dumps"),
and engines of different TP degrees read and write the same stored blocks.
Heads replicated because t > heads are the same shard on every rank that
holds them: the first dump stores it, the others are deduplicated, every such
rank loads it.

How a layer's KV tensor holds those bytes depends on the attention backend.
vLLM gives every backend's layer the logical shape (num_blocks, heads_of_rank,
block_size, 2 * head_dim), in memory in the order its layout asks for, and the
backends read the last dimension three ways (CONTENT): the CPU backend as the
block's K rows then its V rows (per block and head, exactly a stored shard:
loaded and dumped in place), the GPU backends (FLASH_ATTN, FLASHINFER,
TRITON_ATTN, FLEX_ATTENTION) as one token's K then its V, the MLA backends as
one token's latent (one "head", the same on every rank: one shard a block).
kv_view() turns each into a view whose [block, head] is a stored shard; where that is not
contiguous the connector gathers through a staging buffer (docs/vllm.md,
"Other layouts").

Arithmetic over vLLM's config objects and torch views; nothing of vLLM is
imported here.
"""

from dataclasses import dataclass

from .._abi import KVS_MAX_TENSORS as MAX_LAYERS  # a shard's tensors: one per layer


@dataclass(frozen=True)
class StoredGeometry:
    layers: tuple        # attention layer names, in the model's order (a shard's tensors)
    heads: int           # the model's KV heads (all ranks together); 1 with MLA
    head_dim: int        # elements per token of one part; MLA: the whole latent
    block_size: int      # tokens per block
    elem_bytes: int      # bytes of one KV element
    parts: int = 2       # per token and head: K and V; MLA: 1 (the latent)

    @property
    def layer_bytes(self):
        """One shard's tensor: a layer's (block, head), K rows then V rows
        (MLA: the block's latent rows)."""
        return self.parts * self.block_size * self.head_dim * self.elem_bytes

    @property
    def shard_bytes(self):
        """One head of one block, every layer's tensor in order."""
        return self.layer_bytes * len(self.layers)

    @property
    def shards_per_block(self):
        return self.heads

    def shard(self, head):
        return head


def geometry(vllm_config, kv_cache_config):
    """The stored geometry of this engine's model; ValueError naming what
    kvshare cannot store (more than one KV-cache group, no KV heads)."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ValueError(f"kvshare: the model has {len(groups)} KV-cache groups (hybrid or "
                         "sliding-window layers); the connector stores models with one")
    if len(groups[0].layer_names) > MAX_LAYERS:
        raise ValueError(f"kvshare: the model has {len(groups[0].layer_names)} attention "
                         f"layers; a stored shard holds one tensor per layer, at most "
                         f"{MAX_LAYERS}")
    spec = groups[0].kv_cache_spec
    if type(spec).__name__.startswith("MLA"):
        # one latent per token, the same on every rank: one shard a block,
        # which every rank holds (rank_heads replicates it)
        if spec.num_kv_heads != 1:
            raise ValueError(f"kvshare: an MLA KV spec of {spec.num_kv_heads} heads")
        return StoredGeometry(layers=tuple(groups[0].layer_names), heads=1,
                              head_dim=spec.head_size, block_size=spec.block_size,
                              elem_bytes=spec.dtype.itemsize, parts=1)
    heads = vllm_config.model_config.get_total_num_kv_heads()
    if heads < 1 or spec.num_kv_heads < 1:
        raise ValueError(f"kvshare: {heads} KV heads: nothing to store")
    return StoredGeometry(layers=tuple(groups[0].layer_names), heads=heads,
                          head_dim=spec.head_size, block_size=spec.block_size,
                          elem_bytes=spec.dtype.itemsize)


# The attention backends whose KV content kvshare knows, by vLLM's backend name:
# "blocks" per (block, head) its K rows then its V rows, "tokens" per token its
# K then its V, "latent" (MLA) per token one latent vector.
CONTENT = {"CPU_ATTN": "blocks", "FLASH_ATTN": "tokens", "FLASHINFER": "tokens",
           "TRITON_ATTN": "tokens", "FLEX_ATTENTION": "tokens",
           **{name: "latent" for name in ("CPU_MLA", "AMX_MLA", "TRITON_MLA", "FLASHMLA",
                                          "FLASH_ATTN_MLA", "FLASHINFER_MLA", "CUTLASS_MLA")}}


def kv_view(kv, content, geo):
    """A layer's KV tensor (vLLM's logical (blocks, heads_of_rank, tokens,
    parts * head_dim), any strides; a backend whose kernels take smaller
    blocks than the scheduler's has `ratio` kernel blocks per block, in
    order) as (num_blocks, heads_of_rank, parts, ratio, tokens, head_dim):
    [block, head] is one stored shard, K then V (MLA: the latent), token by
    token; a view of kv (writes through).  ValueError naming what does not
    fit."""
    if (content == "latent") != (geo.parts == 1):
        raise ValueError(f"a {content!r} attention backend for a KV spec of "
                         f"{geo.parts} part(s) per token")
    if content not in ("latent", "tokens", "blocks"):
        raise ValueError(f"KV content {content!r} is not one kvshare knows")
    if (kv.dim() != 4 or kv.shape[3] != geo.parts * geo.head_dim or kv.shape[2] < 1 or
            geo.block_size % kv.shape[2] or kv.shape[0] % (geo.block_size // kv.shape[2])):
        raise ValueError(f"a KV cache of shape {tuple(kv.shape)}; vLLM's layout is "
                         f"(num_blocks, heads, {geo.block_size} (or a divisor: kernel "
                         f"blocks), {geo.parts * geo.head_dim})")
    if kv.element_size() != geo.elem_bytes:
        raise ValueError(f"{kv.element_size()}-byte elements, the KV spec says "
                         f"{geo.elem_bytes}")
    ratio = geo.block_size // kv.shape[2]
    if content == "blocks":
        # per (block, head) all K rows, then all V rows: only without kernel
        # blocks (the CPU backend's are the scheduler's)
        if ratio != 1 or not kv[0, 0].is_contiguous():
            raise ValueError("the CPU backend's (block, head) is not one contiguous run")
        return kv.flatten(2).unflatten(2, (2, 1, geo.block_size, geo.head_dim))
    # (num_blocks, ratio, heads, tokens, parts, head_dim): kernel blocks grouped
    v = kv.unflatten(0, (kv.shape[0] // ratio, ratio)).unflatten(4, (geo.parts, geo.head_dim))
    return v.permute(0, 2, 4, 1, 3, 5)


def rank_heads(heads, tp_size, tp_rank, heads_of_rank):
    """The model's head index of each of a rank's local heads (vLLM's split:
    tp <= heads gives rank r the contiguous heads_of_rank heads from
    r * heads_of_rank; tp > heads replicates, rank r holds head r // (tp / heads))."""
    if tp_size <= heads:
        if heads_of_rank * tp_size != heads:
            raise ValueError(f"kvshare: {heads} KV heads over {tp_size} ranks is not "
                             f"{heads_of_rank} per rank")
        return list(range(tp_rank * heads_of_rank, (tp_rank + 1) * heads_of_rank))
    if heads_of_rank != 1 or tp_size % heads:
        raise ValueError(f"kvshare: {heads} KV heads replicated over {tp_size} ranks "
                         f"with {heads_of_rank} per rank: not vLLM's split")
    return [tp_rank // (tp_size // heads)]
