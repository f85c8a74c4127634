"""kvshare.vllm.layout -- how a vLLM block is stored in kvshare, and which part
of it a rank holds (docs/vllm.md, "One stored block serves every TP degree").

A stored block is one vLLM block (block_size tokens) of the whole model.  Its
shards are (layer, KV head) pairs, shard l * heads + h, each the K rows then the
V rows of head h of layer l for the block's tokens: 2 * block_size * head_dim
elements, exactly what vLLM's CPU KV cache holds contiguous for one (block,
head) of a layer, (num_blocks, heads_of_rank, block_size, 2 * head_dim).

So the heads a rank holds are whole shards whatever the tensor-parallel degree:
rank r of a TP=t engine loads and dumps the shards of its heads, the ranks of
one engine complete a stored block together (the library's claims count the
distinct shards of a block from any rank and write it once all are in:
docs/store.md, "Dumps"), and engines of different TP degrees read and write
the same stored blocks.  Heads replicated because t > heads are the same shard
on every rank that holds them: the first dump stores it, the others are
deduplicated, every such rank loads it.

How a layer's KV tensor holds those bytes depends on the attention backend.
vLLM gives every backend's layer the logical shape (num_blocks, heads_of_rank,
block_size, 2 * head_dim), in memory in the order its layout asks for, and the
backends read the last dimension two ways (CONTENT): the CPU backend as the
block's K rows then its V rows (per block and head, exactly a stored shard:
loaded and dumped in place), the GPU backends (FLASH_ATTN, FLASHINFER,
TRITON_ATTN, FLEX_ATTENTION) as one token's K then its V.  kv_view() turns
either into a (num_blocks, heads_of_rank, 2, block_size, head_dim) view whose
[block, head] is a stored shard; where that is not contiguous the connector
gathers through a staging buffer (docs/vllm.md, "Other layouts").

Arithmetic over vLLM's config objects and torch views; nothing of vLLM is
imported here.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class StoredGeometry:
    layers: tuple        # attention layer names, in the model's order (shard major)
    heads: int           # the model's KV heads (all ranks together)
    head_dim: int
    block_size: int      # tokens per block
    elem_bytes: int      # bytes of one KV element

    @property
    def shard_bytes(self):
        """One (layer, head) of one block: K rows then V rows."""
        return 2 * self.block_size * self.head_dim * self.elem_bytes

    @property
    def shards_per_block(self):
        return len(self.layers) * self.heads

    def shard(self, layer_index, head):
        return layer_index * self.heads + head


def geometry(vllm_config, kv_cache_config):
    """The stored geometry of this engine's model; ValueError naming what
    kvshare cannot store (more than one KV-cache group, MLA, no KV heads)."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ValueError(f"kvshare: the model has {len(groups)} KV-cache groups (hybrid or "
                         "sliding-window layers); the connector stores models with one")
    spec = groups[0].kv_cache_spec
    if getattr(spec, "use_mla", False) or type(spec).__name__.startswith("MLA"):
        raise ValueError("kvshare: MLA KV caches are not stored yet (docs/vllm.md)")
    heads = vllm_config.model_config.get_total_num_kv_heads()
    if heads < 1 or spec.num_kv_heads < 1:
        raise ValueError(f"kvshare: {heads} KV heads: nothing to store")
    elem = spec.dtype.itemsize
    return StoredGeometry(layers=tuple(groups[0].layer_names), heads=heads,
                          head_dim=spec.head_size, block_size=spec.block_size,
                          elem_bytes=elem)


# The attention backends whose KV content kvshare knows, by vLLM's backend name.
CONTENT = {"CPU_ATTN": "blocks", "FLASH_ATTN": "tokens", "FLASHINFER": "tokens",
           "TRITON_ATTN": "tokens", "FLEX_ATTENTION": "tokens"}


def kv_view(kv, content, geo):
    """A layer's KV tensor (vLLM's logical (num_blocks, heads_of_rank,
    block_size, 2 * head_dim), any strides) as (num_blocks, heads_of_rank, 2,
    block_size, head_dim): [block, head] is one stored shard, K then V; a view
    of kv (writes through).  ValueError naming what does not fit."""
    want = (geo.block_size, 2 * geo.head_dim)
    if kv.dim() != 4 or tuple(kv.shape[2:]) != want:
        raise ValueError(f"a KV cache of shape {tuple(kv.shape)}; vLLM's layout is "
                         f"(num_blocks, heads, {want[0]}, {want[1]})")
    if kv.element_size() != geo.elem_bytes:
        raise ValueError(f"{kv.element_size()}-byte elements, the KV spec says "
                         f"{geo.elem_bytes}")
    if content == "tokens":  # per token: K (head_dim) then V (head_dim)
        return kv.unflatten(3, (2, geo.head_dim)).permute(0, 1, 3, 2, 4)
    if content == "blocks":  # per (block, head): block_size K rows, then V rows
        if kv[0, 0].is_contiguous():
            return kv.flatten(2).unflatten(2, (2, geo.block_size, geo.head_dim))
        raise ValueError("the CPU backend's (block, head) is not contiguous in it")
    raise ValueError(f"KV content {content!r} is not one kvshare knows")


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
