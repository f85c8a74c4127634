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

Pure arithmetic over vLLM's config objects; nothing of vLLM is imported here.
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
