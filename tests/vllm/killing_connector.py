"""Test-only connectors: kvshare's connector, wrapped, for test_engine.py.
vLLM loads them with kv_connector="<Class>",
kv_connector_module_path="killing_connector" (tests/vllm on PYTHONPATH).

KillingConnector: kvshare's connector, unchanged, in an engine whose rank is
killed -9 at a chosen point of a save.  kv_connector_extra_config:
  "test_kill_at"      where the rank's process SIGKILLs itself:
      "partial" in the first step with saves, right after a dump of only
                the rank's first head reached the shared cache: the blocks
                being stored never get their other heads (a TP peer that
                died before its dump);
      "cached"  right after wait_for_save found that step's dumps in the shared
                cache: every block is complete there, its backend write maybe
                not done;
  "test_kill_file"    armed only once this file exists (none: armed from the
                      start), so an engine can serve prompts before it dies;
  "test_kill_marker"  a file written just before the kill (the test then
                      SIGKILLs the rest of the engine's process group);
  "test_open_after"   a file each rank waits for before it opens its store
                      (register_kv_caches; it writes "<file>.waiting" first,
                      its weights loaded): the engine starts while another
                      still holds the cache, and meets the cache only once
                      the test lets it, after that engine died.

RankLoadFailConnector: kvshare's connector whose TP rank 1 fails every load
(test_engine.py's one-rank failure).

SwappedHeadsConnector, IgnoreLoadErrorsConnector: deliberately broken
connectors, to check that test_engine.py's comparisons can fail
(KVSHARE_VLLM_TEST_BREAK).  SwappedHeadsConnector: each
rank loads and dumps the shards of the mirrored heads (head h as H-1-h), so
at TP=1 the two KV heads trade places, and at TP=2 rank 0 takes rank 1's
head and the other way round.  Blocks it stores are read wrong by a correct
engine, and it reads a correct engine's blocks wrong.  IgnoreLoadErrorsConnector:
failed loads are never reported, so vLLM computes over blocks never filled."""
import logging
import os
import signal
import time

from kvshare.vllm import KVShareConnector

logger = logging.getLogger("vllm")


class KillingConnector(KVShareConnector):

    def register_kv_caches(self, kv_caches):
        gate = self._extra("test_open_after")
        if gate:
            open(f"{gate}.waiting", "w").close()
            deadline = time.monotonic() + 900
            while not os.path.exists(gate):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"killing_connector: {gate} never came")
                time.sleep(0.05)
        super().register_kv_caches(kv_caches)

    def _extra(self, key):
        return self._vllm_config.kv_transfer_config.kv_connector_extra_config.get(key)

    def _armed(self, at):
        if self._extra("test_kill_at") != at:
            return False
        arm = self._extra("test_kill_file")
        return arm is None or os.path.exists(arm)

    def _die(self):
        marker = self._extra("test_kill_marker")
        if marker:
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)

    def _submit_save(self, pairs):
        self._submitted = True
        if not self._armed("partial"):
            return super()._submit_save(pairs)
        self._heads = self._heads[:1]
        super()._submit_save(pairs)
        for task in self._saving:  # that head's shards in the cache, then die
            self._store.wait(task)
        self._die()

    def wait_for_save(self):
        self._submitted = False  # wait_for_save submits the step's dump, if any
        super().wait_for_save()
        if self._submitted and self._armed("cached"):
            self._die()


class SwappedHeadsConnector(KVShareConnector):

    def register_kv_caches(self, kv_caches):
        super().register_kv_caches(kv_caches)
        self._heads = [self._geo.heads - 1 - h for h in self._heads]


class RankLoadFailConnector(KVShareConnector):
    """Every load of TP rank 1 fails at its submit (as a load whose task the
    library refused would), the other ranks' succeed: vLLM must recompute
    the union of the ranks' bad blocks once."""

    def register_kv_caches(self, kv_caches):
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        super().register_kv_caches(kv_caches)
        self._fails = get_tensor_model_parallel_rank() == 1

    def _submit_load(self, pairs):
        if not self._fails:
            return super()._submit_load(pairs)
        logger.warning("killing_connector: rank 1 fails a load of %d blocks", len(pairs))
        self._load_failed({blk for _, blk in pairs})
        return None


class IgnoreLoadErrorsConnector(KVShareConnector):
    """Deliberately broken: failed loads are never reported to vLLM, which
    then computes over the KV blocks the load did not fill."""

    def get_block_ids_with_load_errors(self):
        super().get_block_ids_with_load_errors()
        return set()
