"""perf/vllm_ttft_profile.py -- ProfiledKVShareConnector: kvshare's vLLM
connector (kvshare.vllm.KVShareConnector, unchanged) with its hooks timed, for
perf/vllm_ttft.py --profile and perf/vllm_load_profile.py.  Not a test, not
shipped: a perf/ helper that vLLM loads by kv_connector_module_path (perf/ on
PYTHONPATH, kv_connector "ProfiledKVShareConnector").

Every hook of both roles is timed with time.perf_counter() (CLOCK_MONOTONIC:
comparable across the engine's processes and the child that sends the
request), and inside them the pieces: the scheduler's block ids
(identity.block_ids) and lookup_prefix, the worker's _units (the shards'
addresses computed and packed: Store.shard_table), Store.load_shards /
dump_shards (the submits) and Store.wait.  The store's counters (kvs_store_stats: copy_ns,
owner_reads, load_hits, ...) are taken around each step with loads.

Events go to $KVS_TTFT_PROFILE_DIR/<pid>.jsonl, one JSON object a line
{"ev": name, "t0": s, "t1": s, ...}, flushed at the end of each worker step
(wait_for_save) and at each scheduler hook.  KVS_TTFT_CPROFILE=1 also runs
cProfile over a window: on the scheduler's thread from the lookup of a
request of at least $KVS_TTFT_PROFILE_MIN_TOKENS tokens to its
request_finished, on a worker from start_load_kv of a step with loads to that
step's wait_for_save; written as <pid>.<n>.prof (pstats) in the same dir.
Without KVS_TTFT_PROFILE_DIR nothing is written: the events stay in
LOG.events for the caller."""

import cProfile
import json
import os
import time

from kvshare.vllm import connector as _conn
from kvshare.vllm.connector import KVShareConnector

_now = time.perf_counter
_DIR = os.environ.get("KVS_TTFT_PROFILE_DIR")
_CPROFILE = os.environ.get("KVS_TTFT_CPROFILE") == "1"
_MIN_TOKENS = int(os.environ.get("KVS_TTFT_PROFILE_MIN_TOKENS", "0"))
_STAT_KEYS = ("load_hits", "owner_reads", "shards_loaded", "copy_bytes", "copy_ns",
              "tasks_load", "task_lat_ns_sum", "staged_shards")


class _Log:
    def __init__(self):
        self.events = []
        self.n_prof = 0

    def add(self, ev, t0, t1=None, **kw):
        self.events.append({"ev": ev, "t0": t0, "t1": _now() if t1 is None else t1, **kw})

    def flush(self):
        if not _DIR or not self.events:
            return  # no dir: kept for the caller (perf/vllm_load_profile.py) to read
        with open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a") as f:
            for e in self.events:
                f.write(json.dumps(e) + "\n")
        self.events = []

    def prof_path(self):
        self.n_prof += 1
        return os.path.join(_DIR or ".", f"{os.getpid()}.{self.n_prof}.prof")


LOG = _Log()


class _TimedStore:
    """The store, its calls the connector makes timed (everything else passed on)."""

    def __init__(self, store):
        self._s = store

    def __getattr__(self, name):
        return getattr(self._s, name)

    def lookup_prefix(self, ids):
        t0 = _now()
        r = self._s.lookup_prefix(ids)
        LOG.add("store.lookup_prefix", t0, n=len(ids), hit=r)
        return r

    def load_shards(self, units, keep=(), tensors=None):
        t0 = _now()
        r = self._s.load_shards(units, keep, tensors)
        LOG.add("store.load_shards", t0, n=len(units))
        return r

    def dump_shards(self, units, keep=(), cuda_event=None):
        t0 = _now()
        r = self._s.dump_shards(units, keep, cuda_event)
        LOG.add("store.dump_shards", t0, n=len(units))
        return r

    def wait(self, task, timeout=None):
        t0 = _now()
        r = self._s.wait(task, timeout)
        LOG.add(f"store.wait.{task.kind}", t0)
        return r


def _stats(store):
    st = store.stats()
    return {k: st[k] for k in _STAT_KEYS}


class ProfiledKVShareConnector(KVShareConnector):
    """KVShareConnector with its hooks and their pieces timed (module docstring)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._prof = None
        self._stats0 = None

    # -- profiling windows ---------------------------------------------------

    def _prof_start(self):
        if _CPROFILE and self._prof is None:
            self._prof = cProfile.Profile()
            self._prof.enable()

    def _prof_stop(self):
        if self._prof is not None:
            self._prof.disable()
            self._prof.dump_stats(LOG.prof_path())
            self._prof = None

    # -- scheduler side ------------------------------------------------------

    def _watcher(self):
        s = super()._watcher()
        if s is not None and not isinstance(s, _TimedStore):
            self._store = s = _TimedStore(s)
        return s

    def _state(self, request):
        t0 = _now()
        n0 = len(self._reqs[request.request_id].ids) if request.request_id in self._reqs \
            else 0
        st = super()._state(request)
        if len(st.ids) != n0:
            LOG.add("sched.block_ids", t0, n=len(st.ids) - n0)
        return st

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if request.num_tokens >= _MIN_TOKENS:
            self._prof_start()
        t0 = _now()
        r = super().get_num_new_matched_tokens(request, num_computed_tokens)
        LOG.add("sched.get_num_new_matched_tokens", t0, req=request.request_id,
                tokens=request.num_tokens, local=num_computed_tokens, matched=r[0])
        return r

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        t0 = _now()
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        LOG.add("sched.update_state_after_alloc", t0, req=request.request_id,
                external=num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        t0 = _now()
        meta = super().build_connector_meta(scheduler_output)
        LOG.add("sched.build_connector_meta", t0,
                loads=sum(len(p) for _, p in meta.loads),
                saves=sum(len(p) for _, p in meta.saves))
        LOG.flush()
        return meta

    def request_finished(self, request, block_ids):
        t0 = _now()
        r = super().request_finished(request, block_ids)
        LOG.add("sched.request_finished", t0, req=request.request_id,
                tokens=request.num_tokens)
        self._prof_stop()
        LOG.flush()
        return r

    # -- worker side ---------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        super().register_kv_caches(kv_caches)
        self._store = _TimedStore(self._store)
        LOG.add("worker.registered", _now(), heads=list(self._heads),
                in_place=self._in_place)
        LOG.flush()

    def bind_connector_metadata(self, connector_metadata):
        t0 = _now()
        super().bind_connector_metadata(connector_metadata)
        if self.role != _conn.KVConnectorRole.SCHEDULER:
            # the worker's step begins: vLLM's model runner binds the metadata
            # before the forward (start_load_kv comes before it only with loads)
            LOG.add("worker.bind_connector_metadata", t0)

    def _units(self, pairs, views):
        t0 = _now()
        r = super()._units(pairs, views)
        LOG.add("worker._units", t0, n=len(r))
        return r

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        loads = sum(len(p) for _, p in meta.loads)
        if loads and self._store is not None:
            self._prof_start()
            self._stats0 = _stats(self._store)
        t0 = _now()
        super().start_load_kv(forward_context, **kwargs)
        LOG.add("worker.start_load_kv", t0, loads=loads)

    def wait_for_layer_load(self, layer_name):
        t0 = _now()
        pending = self._loading is not None and not self._loading.waited
        super().wait_for_layer_load(layer_name)
        if pending:
            LOG.add("worker.wait_for_layer_load", t0, layer=layer_name)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        t0 = _now()
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        LOG.add("worker.save_kv_layer", t0, layer=layer_name)

    def wait_for_save(self):
        t0 = _now()
        super().wait_for_save()
        t1 = _now()
        LOG.add("worker.wait_for_save", t0, t1)
        if self._stats0 is not None and self._store is not None:
            now = _stats(self._store)
            LOG.add("worker.store_stats", t1, t1,
                    **{k: now[k] - self._stats0[k] for k in now})
            self._stats0 = None
        self._prof_stop()
        LOG.flush()


# vLLM's factory looks the class up by name in this module.
KVShareMetadata = _conn.KVShareMetadata
__all__ = ["ProfiledKVShareConnector"]
