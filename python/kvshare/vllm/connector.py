"""kvshare.vllm.connector -- KVShareConnector, vLLM's KV connector (v1) over a
kvshare store: every engine on a node, whatever its TP degree, shares one
host-memory tier of stored blocks, backed by kvshare's backend.

Loaded by vLLM with
    kv_transfer_config={"kv_connector": "KVShareConnector",
                        "kv_connector_module_path": "kvshare.vllm",
                        "kv_role": "kv_both",
                        "kv_connector_extra_config": {"kvshare_config": {...}}}
where kvshare_config holds the store's key=value keys (a dict or the
"k=v,k=v" string: the cache's capacity, the backend, ...; docs/vllm.md lists
what the connector sets itself).  kv_role "kv_producer" only saves,
"kv_consumer" only loads.

Scheduler side (one per engine): a watcher store answers how many leading
blocks of a request are stored (kvs_store_lookup_prefix over the kvshare ids
of its block hashes, identity.block_ids), keeping at least one token to
compute; loads are synchronous (the step that computes past them loads them
first).  The metadata of each step lists, per request, the (kvshare id, vLLM
block id) pairs to load and those that became full this step, to save.

Worker side (one per rank): the rank's store (a GPU rank of the cache, its
device the rank's).  A shard is one KV head of a block across every layer, a
tensor per layer (layout.py), so a step's load is the shards of the rank's
heads of every block to load: start_load_kv packs them once and submits
kvshare_load_groups tasks (LOAD_GROUPS), each copying the tensors of a run
of consecutive layers, and wait_for_layer_load waits for its layer's task
(the forward computes the first layers while the later ones are copied);
the step's dump is one task: wait_for_save, once
the forward computed every layer, submits the step's dump and waits for it to
be in the shared cache (dump_wait=cached: the backend write then runs from the
cache, and the KV blocks are the engine's again); save_kv_layer has nothing
to do.  Where a rank's (block, head) of a layer is one contiguous run of its
KV tensor (the CPU backend) the shards move in place; elsewhere (the GPU
backends: each token's K then V) each layer's blocks go through a staging
buffer on the tensor's device, gathered before the dump (which waits for the
gathers' CUDA event) and scattered, layer by layer, after the load.  A load that fails -- a
backend error, a dead owner, its deadline (timeout_ms) -- reports its vLLM
blocks through get_block_ids_with_load_errors, so vLLM recomputes them (with
kv_load_failure_policy="recompute"): never wrong KV, never a hang.  A failed
save is logged and counted: a later miss, not an error.  A rank whose cache
is bound to another fingerprint's layout_tag (an engine with other weights
given the same kvshare_unique_id: any rank writes any rank's dumps, under its
own tag) is refused by the library; the worker raises, naming the key.

Shutdown (vLLM's worker shutdown calls shutdown()): the saves still running
are waited for, then the store is flushed (Store.flush: the blocks of its
cached dumps written to the backend) for at most kvshare_flush_timeout_s
(default FLUSH_TIMEOUT_S), then closed.  Blocks left unwritten are logged at
WARNING with their count; they stay in the node's shared cache, which is kept
for the node's other ranks or its next opener to write.  Nothing raises out of
shutdown.
"""

import bisect
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                              KVConnectorMetadata,
                                                              KVConnectorRole)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
from vllm.logger import init_logger

from .._abi import KVS_ECONFIG
from .._lib import KvsError
from ..store import Store, _config_string, check_config
from . import identity, layout

# Under vLLM's logger, so that the lines land in the engine's log, in its format.
logger = init_logger("vllm.kvshare.connector")


class _ToVllmLog(logging.Handler):
    """Hands the library's records to vLLM's logger, as its own lines are:
    its handlers, its format, its level -- looked up at each record, since
    vLLM (re)configures its logging when an engine starts, after this import."""

    def emit(self, record):
        target = logging.getLogger("vllm")
        if target.isEnabledFor(record.levelno):
            target.handle(record)


def _route_library_log():
    """The library's lines (logger "kvshare", kvshare._lib) into the engine's
    log, unless the user configured that logger: not Python's last-resort
    stderr with a bare message."""
    lib_log = logging.getLogger("kvshare")
    if lib_log.level != logging.NOTSET or any(not isinstance(h, logging.NullHandler)
                                              for h in lib_log.handlers):
        return  # the user's
    lib_log.addHandler(_ToVllmLog())
    lib_log.setLevel(logging.DEBUG)  # vLLM's level decides, in the handler
    lib_log.propagate = False


_route_library_log()

# kv_connector_extra_config keys of the connector itself.
EXTRA_CONFIG = "kvshare_config"      # the store's keys (dict or "k=v,..." string)
EXTRA_UNIQUE_ID = "kvshare_unique_id"  # the cache's name (default: from the fingerprint)
EXTRA_FLUSH_TIMEOUT = "kvshare_flush_timeout_s"  # shutdown's flush bound, seconds
EXTRA_LOAD_MODE = "kvshare_load_mode"  # LOAD_MODES: which loads leave the step
EXTRA_STEP_LOAD_MIB = "kvshare_step_load_mib"  # hybrid: what a rank loads in a step
EXTRA_LOAD_GROUPS = "kvshare_load_groups"  # tasks a load in the step is cut into
# "hybrid": a request whose blocks are all resident in the shared cache loads in
# the step while the step's loads stay within kvshare_step_load_mib a rank, or
# whatever its size when it is the engine's only request; any other (a backend
# read, a wait for another rank's, over the budget beside other requests) is
# asynchronous.  "async": every load.  "sync": none (every load in its step).
LOAD_MODES = ("hybrid", "async", "sync")
# A step that computes nothing sleeps this long at most for its oldest running
# load (get_finished, in the store: the GIL released).  vLLM steps again at once
# after an empty step, so an engine whose every request waits for its load
# would otherwise spin in the engine and every rank, taking the CPUs from the
# backend it waits for.  A request arriving meanwhile waits this long at most.
IDLE_WAIT_S = 0.01
# The default budget: 64 MiB a rank was ~8 ms of copies from the shared cache on
# the 2-core machine this was measured on (perf/hit_bench.sh: ~8 GB/s, one
# copier thread; ~5 ms with the two copy threads HOST_COPY_THREADS gives a CPU
# worker), and is 3.5-5 ms since the host engine streams its copies (13-19 GB/s
# for this layout, one or two threads); ~1.3 ms at a GPU's ~50 GB/s
# host-to-device rate; a decode step of the batch it joins is tens of ms.  Kept
# at 64 until a run of perf/vllm_itl.py (mode hybrid) says a larger one pays.
STEP_LOAD_MIB = 64
# cache_stream_number of a CPU worker's store: the host engine's threads that
# share one large copy (io/copy_crew.c).  Two moved a 4,096-token hit's 256 MiB
# into vLLM's KV about 1.3x as fast as one on the 2-core machine, once the store's
# threads were off the forward's core (docs/vllm.md, "Where a CPU worker's
# store threads run").
HOST_COPY_THREADS = 2
# A load in the step is LOAD_GROUPS tasks, each of a run of consecutive layers
# (kvs_store_load_tensors: a shard's tensors are its layers), submitted at once
# in the model's order; the forward waits for a layer's task only, and computes
# the first layers while the later ones are copied (docs/vllm.md, "Layer groups").
LOAD_GROUPS = 4
# The store's cpu_affinity_cores takes CPUs below this (KVS_STORE_MAX_CPUS).
STORE_MAX_CPUS = 1024
# The default bound of the flush at shutdown: inside the 5 s vLLM gives a
# worker to exit before it sends SIGTERM (VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS),
# leaving the close its own second or so.
FLUSH_TIMEOUT_S = 3.0
# Keys the connector derives from the engine; a kvshare_config naming them is refused.
_DERIVED = ("device_id", "shard_size", "block_size", "tensor_size", "tensor_size_list",
            "layout_tag")


@dataclass
class KVShareMetadata(KVConnectorMetadata):
    """One step's transfers: per request, (kvshare id, vLLM block id) pairs."""
    loads: list = field(default_factory=list)  # [(req_id, [(id bytes, block id)])]
    saves: list = field(default_factory=list)
    async_loads: list = field(default_factory=list)  # as loads: submitted, not waited
    idle: bool = False  # the step computes nothing (every request waits for its load)


@dataclass
class KVShareStats(KVConnectorStats):
    """Counters of an interval, summed over ranks (vLLM's stats hooks)."""

    def reset(self):
        self.data = {}

    def aggregate(self, other):
        for k, v in other.data.items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self):
        return dict(self.data)

    def is_empty(self):
        return not any(self.data.values())


def _user_items(extra):
    """The user's kvshare_config as "k=v" items, and the keys they set;
    ValueError when they set one the connector derives."""
    user = extra.get(EXTRA_CONFIG) or ""
    items = [item for item in _config_string(user).split(",") if item.strip()]
    given = {item.split("=", 1)[0].strip() for item in items}
    bad = sorted(given & set(_DERIVED))
    if bad:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_CONFIG!r}] sets "
                         f"{', '.join(bad)}: the connector derives these from the engine "
                         "(the model's layers, heads, block size; the rank; its fingerprint)")
    return items, given


def _join_keys(defaults, fixed, items, given):
    keys = {k: v for k, v in defaults.items() if k not in given} | fixed
    return ",".join([_config_string(keys)] + items)


def _flush_timeout(extra):
    """kv_connector_extra_config[kvshare_flush_timeout_s] (seconds >= 0, finite;
    default FLUSH_TIMEOUT_S); ValueError naming the key otherwise."""
    value = extra.get(EXTRA_FLUSH_TIMEOUT, FLUSH_TIMEOUT_S)
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(value, bool) or not 0 <= t < math.inf:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_FLUSH_TIMEOUT!r}] is "
                         f"{value!r}: want seconds, a finite number >= 0 (how long shutdown "
                         "waits for saved blocks to reach the backend)")
    return t


def _load_policy(extra):
    """(mode, bytes a rank loads in a step, tasks a load in the step is cut
    into) from kv_connector_extra_config; ValueError naming the key otherwise."""
    mode = extra.get(EXTRA_LOAD_MODE, "hybrid")
    if mode not in LOAD_MODES:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_LOAD_MODE!r}] is "
                         f"{mode!r}: want one of {', '.join(LOAD_MODES)}")
    mib = extra.get(EXTRA_STEP_LOAD_MIB, STEP_LOAD_MIB)
    if isinstance(mib, bool) or not isinstance(mib, (int, float)) or not 0 <= mib < math.inf:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_STEP_LOAD_MIB!r}] is "
                         f"{mib!r}: want MiB, a finite number >= 0 (what a rank loads in a "
                         "step; more goes asynchronous)")
    groups = extra.get(EXTRA_LOAD_GROUPS, LOAD_GROUPS)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_LOAD_GROUPS!r}] is "
                         f"{groups!r}: want an int >= 1 (tasks a load in the step is cut into, "
                         "each a run of layers; 1: one task, the first layer waits for all)")
    return mode, int(mib * 2**20), groups


def _cpu_list(cpus):
    """A set of CPU numbers as cpu_affinity_cores writes it: "0-3:8"."""
    runs, cpus = [], sorted(cpus)
    for c in cpus:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ":".join(f"{a}-{b}" if a < b else f"{a}" for a, b in runs)


def _store_cpus():
    """cpu_affinity_cores for a CPU worker's store threads, or None to leave
    them on the opening thread's CPUs.  vLLM's CPU backend binds each OpenMP
    thread of a worker, its main thread (the OpenMP master) among them, to one
    core; the store's dispatcher, copier and copy threads, started by that
    thread, would inherit its single core and take turns with the forward on
    it.  They get the CPUs the engine's process could use before that binding
    (the parent process's affinity; every online CPU where it cannot be read),
    where the kernel schedules them on whichever is free: the CPUs vLLM
    reserves for its scheduler and KV connectors, or a core the forward leaves
    idle while it waits for a load."""
    mine = os.sched_getaffinity(0)
    try:
        allowed = os.sched_getaffinity(os.getppid())
    except OSError:
        allowed = set(range(os.cpu_count() or 1))
    allowed = {c for c in allowed if c < STORE_MAX_CPUS}
    if not allowed > mine:
        return None
    logger.info("kvshare: this worker thread is bound to CPUs %s; the store's threads run on "
                "%s (kvshare_config cpu_affinity_cores overrides)", _cpu_list(mine),
                _cpu_list(allowed))
    return _cpu_list(allowed)


def _store_keys(vllm_config, fp, geo, device_id, copy_engine):
    """The store's configuration string: what the engine fixes (the geometry,
    the device, the fingerprint's layout_tag), the connector's defaults
    (copy_engine among them) unless the user's kvshare_config sets them, then
    the user's keys."""
    extra = identity.extra_config(vllm_config)
    items, given = _user_items(extra)
    defaults = {
        "unique_id": extra.get(EXTRA_UNIQUE_ID) or "vllm-" + fp.hex()[:16],
        "dump_wait": "cached",
        # a step's load groups and dump, and tasks a failed step left unreaped
        "waiting_queue_depth": 64,
        "copy_engine": copy_engine,
    }
    if copy_engine == "host":
        # no DMA engine: a second thread shares each large copy (io/copy_crew.c)
        defaults["cache_stream_number"] = HOST_COPY_THREADS
        cpus = None if "cpu_affinity_cores" in given else _store_cpus()
        if cpus:  # (logged by _store_cpus: not when the user's key wins)
            defaults["cpu_affinity_cores"] = cpus
    fixed = {"device_id": device_id, "shard_size": geo.shard_bytes,
             "tensor_size": geo.layer_bytes,
             "block_size": geo.shard_bytes * geo.shards_per_block,
             "layout_tag": identity.layout_tag(fp)}
    return _join_keys(defaults, fixed, items, given)


def check_transfer_config(kv_transfer_config):
    """Refuse a kvshare configuration that no store could open -- a key the
    library does not know, a bad value, a missing or unwritable root, a Redis
    that does not answer -- with the library's message (ValueError), before the
    engine loads its weights: kvshare.vllm calls this when vLLM resolves the
    connector's class while it builds the engine's config (__init__.py); the
    constructor calls it again.  What needs the model (the geometry, the
    fingerprint) is not checked here: no cache is opened or created."""
    extra = kv_transfer_config.kv_connector_extra_config or {}
    _flush_timeout(extra)
    _load_policy(extra)
    items, given = _user_items(extra)
    # device 0 with the host engine: the sizes a rank needs are checked, no
    # copy engine is opened (kvs_store_config_check opens none anyway)
    keys = _join_keys({"unique_id": extra.get(EXTRA_UNIQUE_ID) or "vllm-config-check",
                       "copy_engine": "host"}, {"device_id": 0}, items, given)
    if keys in _checked:  # vLLM resolves the class many times per process
        return
    try:
        check_config(keys)
    except KvsError as e:
        raise ValueError(f"kvshare: kv_connector_extra_config[{EXTRA_CONFIG!r}] is refused: "
                         f"{e.detail or e}") from None
    _checked.add(keys)


_checked = set()  # configurations check_transfer_config passed in this process

# The library's line when a rank's backend identity is not its cache's
# (store/store.c, backend_bind): "store: the cache '<id>' is bound to another
# backend: its ranks dump to <theirs>; this rank to <mine> (give every ...",
# each identity ending " layout_tag=<n>".
_BOUND = re.compile(r"is bound to another backend: its ranks dump to .* "
                    r"layout_tag=(\d+); this rank to ")


def _bound_tag(err):
    """The layout_tag a store open was refused for (the cache's ranks'), when
    the library refused it because the cache is bound to another backend
    identity; None for any other error (or a binding whose identity was not
    readable yet)."""
    if err.code != -KVS_ECONFIG:
        return None
    m = _BOUND.search(err.detail or "")
    return int(m.group(1)) if m else None


def _store_id(keys):
    return dict(item.split("=", 1) for item in keys.split(",") if "=" in item).get("unique_id")


class _Load:
    """A load on a worker (a step's, or one request's asynchronous one): its
    tasks, one per run of layers (ends[g]: the first layer after task g's),
    how many were waited for, the vLLM blocks it fills, and when staged the
    block ids (rows) and each layer's buffer not yet scattered."""
    __slots__ = ("tasks", "ends", "waited", "failed", "blocks", "rows", "staged")

    def __init__(self, tasks, ends, blocks, rows, staged):
        self.tasks, self.ends, self.blocks = tasks, ends, blocks
        self.rows, self.staged = rows, staged
        self.waited = 0
        self.failed = False  # reported to vLLM (its blocks are load errors)


class _Req:
    """The scheduler's view of one request."""
    __slots__ = ("request", "ids", "block_ids", "stored", "local", "load", "saved", "upto",
                 "is_async", "loaded", "failed")

    def __init__(self, request):
        self.request = request
        self.ids = []         # kvshare ids of request.block_hashes, extended lazily
        self.block_ids = []   # vLLM block ids of the request (group 0)
        self.stored = 0       # leading blocks stored when it was looked up
        self.local = 0        # tokens vLLM had computed locally at lookup
        self.load = None      # range of block indices to load next step
        self.saved = 0        # leading blocks stored or submitted for saving
        self.upto = None      # tokens computed once the last scheduled step ran
        self.is_async = False  # the last lookup's load leaves the step
        self.loaded = set()   # vLLM block ids of its asynchronous load
        self.failed = False   # its asynchronous load failed: lookups miss


class KVShareConnector(KVConnectorBase_V1):
    """vLLM's KV connector over kvshare (module docstring)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        check_transfer_config(vllm_config.kv_transfer_config)
        identity.check_hash_determinism(vllm_config)
        self._fp = identity.fingerprint(vllm_config)
        self._geo = layout.geometry(vllm_config, kv_cache_config)
        kt = vllm_config.kv_transfer_config
        self._loads_on = kt.kv_role in ("kv_both", "kv_consumer")
        self._saves_on = kt.kv_role in ("kv_both", "kv_producer")
        self._block = self._geo.block_size
        self._flush_s = _flush_timeout(kt.kv_connector_extra_config or {})
        self._load_mode, self._step_budget, self._load_groups = _load_policy(
            kt.kv_connector_extra_config or {})
        self._store = None
        if role == KVConnectorRole.SCHEDULER:
            self._reqs = {}
            self._async_new = []   # (req_id, pairs) of asynchronous loads to submit
            self._step_bytes = 0   # a rank's bytes of this step's loads in the step
            tp = vllm_config.parallel_config.tensor_parallel_size
            # a rank's bytes of a block: its heads' shards (vLLM's split, layout.py)
            self._rank_block_bytes = self._geo.shard_bytes * max(1, self._geo.heads // tp)
            self._watch_keys = _store_keys(vllm_config, self._fp, self._geo, -1, "host")
            self._watch_failed = None  # the last open error, logged once
        else:
            self._layers = {}    # layer name -> (kv tensor, layout.kv_view), model order
            self._loading = None  # this step's _Load
            self._async = {}      # req_id -> its asynchronous _Load
            self._async_done = set()  # requests whose asynchronous load ended unsubmitted
            self._idle = False    # this step computes nothing (its metadata's idle)
            self._saving = []    # dump Tasks of this step
            self._errors = set()
            self._loading_reqs = set()  # requests with loads this step
            self._tainted = set()  # ... whose loads failed: their KV is not to be saved
            self._counts = {}
            self._last = {}      # store counters at the last stats call

    # -- scheduler side ----------------------------------------------------

    def _watcher(self):
        """The scheduler's watcher store, opened once the ranks made the cache
        (an engine's scheduler can start before its workers' stores)."""
        if self._store is None:
            try:
                self._store = Store(self._watch_keys)
            except KvsError as e:
                if str(e) != self._watch_failed:
                    logger.warning("kvshare: no stored blocks can be matched yet: %s", e)
                    self._watch_failed = str(e)
        return self._store

    def _state(self, request):
        st = self._reqs.get(request.request_id)
        if st is None or st.request is not request:
            st = self._reqs[request.request_id] = _Req(request)
        hashes = request.block_hashes
        if len(st.ids) < len(hashes):
            st.ids.extend(identity.block_ids(hashes[len(st.ids):], self._fp))
        return st

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        st = self._state(request)
        st.local = num_computed_tokens
        st.load = None
        st.is_async = False
        # after a failed asynchronous load vLLM rewinds the request and asks
        # again: a miss, or it would be offered the same hit in a loop
        store = self._watcher() if self._loads_on and not st.failed else None
        stored = 0
        if store is not None and st.ids:
            try:
                stored = store.lookup_prefix(st.ids)
            except KvsError as e:
                logger.warning("kvshare: lookup of %s failed: %s", request.request_id, e)
        st.stored = stored
        st.saved = max(stored, num_computed_tokens // self._block) if self._saves_on else 0
        usable = min(stored, (request.num_tokens - 1) // self._block)  # one token to compute
        n = max(0, usable * self._block - num_computed_tokens)
        if n:
            st.is_async = self._loads_async(store, st, num_computed_tokens // self._block,
                                            n // self._block)
        return n, st.is_async

    def _loads_async(self, store, st, first, count):
        """Whether the load of st's blocks [first, first + count) leaves the
        step (EXTRA_LOAD_MODE): in "hybrid", unless every block is resident
        in the shared cache and the step's loads stay within the budget, or
        st's request is the only one the engine has (the budget keeps a load
        from stalling other requests' steps; with none, leaving the step only
        adds one for the report)."""
        if self._load_mode != "hybrid":
            return self._load_mode == "async"
        # st is among _reqs (get_num_new_matched_tokens made it): alone is one
        if (self._step_bytes + count * self._rank_block_bytes > self._step_budget
                and len(self._reqs) > 1):
            return True
        try:
            return store.resident_prefix(st.ids[first:first + count]) < count
        except KvsError as e:
            logger.warning("kvshare: resident lookup of %s failed: %s", st.request.request_id, e)
            return True

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        st = self._state(request)
        st.block_ids = list(blocks.get_block_ids()[0])
        if num_external_tokens > 0:
            first = st.local // self._block
            load = range(first, first + num_external_tokens // self._block)
            if st.is_async:  # the request waits (WAITING_FOR_REMOTE_KVS), unscheduled
                pairs = [(st.ids[i], st.block_ids[i]) for i in load]
                st.loaded = {blk for _, blk in pairs}
                self._async_new.append((request.request_id, pairs))
            else:
                st.load = load
                self._step_bytes += len(load) * self._rank_block_bytes

    def _step(self, meta, req_id, st, block_ids, num_computed, num_scheduled):
        if block_ids is not None:
            st.block_ids = block_ids
        if st.upto is not None and num_computed < st.upto:
            # vLLM took computed tokens back (a failed load, preemption): the
            # blocks past them are saved again once recomputed (the worker
            # dropped the saves of a step whose loads failed; a dump of what
            # is stored already is deduplicated)
            st.saved = min(st.saved, num_computed // self._block)
        st.upto = num_computed + num_scheduled
        if st.load is not None:
            meta.loads.append((req_id, [(st.ids[i], st.block_ids[i]) for i in st.load]))
            st.load = None
        if not self._saves_on:
            return
        full = min((num_computed + num_scheduled) // self._block, len(st.ids),
                   len(st.block_ids))
        if full > st.saved:
            meta.saves.append((req_id, [(st.ids[i], st.block_ids[i])
                                        for i in range(st.saved, full)]))
            st.saved = full

    def build_connector_meta(self, scheduler_output):
        meta = KVShareMetadata(async_loads=self._async_new,
                               idle=scheduler_output.total_num_scheduled_tokens == 0)
        self._async_new, self._step_bytes = [], 0
        n_sched = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is not None:
                self._state(st.request)
                self._step(meta, new.req_id, st, list(new.block_ids[0]),
                           new.num_computed_tokens, n_sched[new.req_id])
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            self._state(st.request)
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                block_ids = list(new_ids[0]) if new_ids else []
            else:
                block_ids = st.block_ids + (list(new_ids[0]) if new_ids else [])
            self._step(meta, req_id, st, block_ids, cached.num_computed_tokens[i],
                       n_sched[req_id])
        return meta

    def update_connector_output(self, connector_output):
        """A failed asynchronous load (its blocks among the ranks' invalid
        ones, reported no later than the pass that finishes it) makes the
        request's next lookups miss (get_num_new_matched_tokens); once
        finished, its blocks are no longer its load's."""
        bad = connector_output.invalid_block_ids
        if bad:
            for st in self._reqs.values():
                if st.loaded & bad:
                    st.failed = True
        for req_id in connector_output.finished_recving or ():
            st = self._reqs.get(req_id)
            if st is not None:
                st.loaded = set()

    def request_finished(self, request, block_ids):
        self._reqs.pop(request.request_id, None)
        return False, None  # saves end within their step: the blocks are free now

    # -- worker side -------------------------------------------------------

    def _content(self):
        """How this engine's attention backend fills a layer's KV tensor
        (layout.CONTENT), from the backends of its attention layers."""
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends

        names = {b.get_name() for b in get_current_attn_backends(self._vllm_config,
                                                                list(self._geo.layers))}
        kinds = {layout.CONTENT.get(n) for n in names}
        if len(kinds) != 1 or None in kinds:
            raise ValueError(f"kvshare: attention backend(s) {', '.join(sorted(names))}: the "
                             f"connector knows the KV layout of {', '.join(layout.CONTENT)}")
        return kinds.pop()

    def register_kv_caches(self, kv_caches):
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        geo = self._geo
        tp = self._vllm_config.parallel_config.tensor_parallel_size
        rank = get_tensor_model_parallel_rank()
        content = self._content()
        for name in geo.layers:
            kv = kv_caches[name]
            try:
                view = layout.kv_view(kv, content, geo)
            except ValueError as e:
                raise ValueError(f"kvshare: layer {name}: {e} (docs/vllm.md)") from None
            self._layers[name] = (kv, view)
        self._layer_index = {name: i for i, name in enumerate(self._layers)}
        self._heads_of_rank = view.shape[1]
        self._heads = layout.rank_heads(geo.heads, tp, rank, self._heads_of_rank)
        self._rank_bytes = geo.shard_bytes * len(self._heads)  # of a block: its heads' shards
        # A (block, head) that is one contiguous run of the tensor is loaded and
        # dumped in place; otherwise through a staging buffer on its device.
        self._in_place = all(v[0, 0].is_contiguous() for _, v in self._layers.values())
        if kv.device.type == "cuda":
            device, engine = kv.device.index, "cuda"
        else:
            device, engine = rank, "host"
        self._store = self._open_store(_store_keys(self._vllm_config, self._fp, geo, device,
                                                   engine))
        logger.info("kvshare: rank %d of %d stores heads %s of %d, %d layers, %d-byte shards "
                    "(%s) in cache %s", rank, tp, self._heads, geo.heads, len(geo.layers),
                    geo.shard_bytes, "in place" if self._in_place else "staged",
                    self._store.unique_id)

    def _open_store(self, keys):
        """The rank's store.  A cache bound to another engine's fingerprint
        (its layout_tag: an engine with other weights given the same
        kvshare_unique_id, alive or leaving DIRTY blocks) is refused by the
        library with KVS_ECONFIG (store/store.c, backend_bind: any rank may
        write another's dumps, under its own tag); that refusal is raised as
        a ValueError naming the key and the fix.  Every other error (the
        geometry, the backend, ...) is the library's KvsError, unchanged."""
        try:
            return Store(keys)
        except KvsError as e:
            theirs = _bound_tag(e)
            if theirs is None or theirs == identity.layout_tag(self._fp):
                raise
            raise ValueError(
                f"kvshare: the cache {_store_id(keys)!r} (kv_connector_extra_config"
                f"[{EXTRA_UNIQUE_ID!r}]) is bound to layout_tag {theirs}, not this engine's "
                f"{identity.layout_tag(self._fp)}: another engine with other weights (a "
                "different fingerprint) uses this cache: give this engine its own "
                "kvshare_unique_id, or leave it unset (the default is per fingerprint). "
                f"{e}") from None

    def _units(self, pairs, views):
        """The rank's heads of the given blocks as a ShardList
        (Store.shard_table): (block k, head j) in that order, each with an
        address per layer; views, one per layer in the model's order, hold
        them in layout.kv_view's shape: the layers' views when in place
        (indexed by vLLM block id), else staging buffers (indexed by pair).
        Computed as tensors: no Python step per shard or layer."""
        i64, nh = torch.int64, len(self._heads)
        base = torch.tensor([v.data_ptr() for v in views], dtype=i64)
        by_row = torch.tensor([v.stride(0) * v.element_size() for v in views], dtype=i64)
        by_head = torch.tensor([v.stride(1) * v.element_size() for v in views], dtype=i64)
        rows = (torch.tensor([blk for _, blk in pairs], dtype=i64) if self._in_place
                else torch.arange(len(pairs), dtype=i64))
        addrs = (base + rows[:, None, None] * by_row
                 + torch.arange(nh, dtype=i64)[None, :, None] * by_head)
        return self._store.shard_table(b"".join(kid * nh for kid, _ in pairs),
                                       [self._geo.shard(h) for h in self._heads] * len(pairs),
                                       addrs.reshape(-1).numpy())

    def _staging(self, view, n):
        """A staging buffer of n blocks of a layer's view, on its device."""
        return torch.empty((n,) + tuple(view.shape[1:]), dtype=view.dtype, device=view.device)

    @staticmethod
    def _rows(view, pairs):
        """The vLLM block ids of pairs, as an index on the view's device."""
        return torch.tensor([blk for _, blk in pairs], dtype=torch.long, device=view.device)

    def _count(self, key, n):
        self._counts[key] = self._counts.get(key, 0) + n

    def _submit_load(self, pairs, groups=1):
        """A _Load of the rank's heads of pairs' blocks, every layer, submitted
        (into the layers' views in place, else staging buffers) as `groups`
        tasks (at most one a layer), each of a run of consecutive layers in
        the model's order: the shards packed once (_units), each task
        copying its layers' tensors of them.  None when no task was
        submitted; a task refused after the first leaves the load failed,
        its submitted tasks still to be waited for.  A refusal is logged and
        its blocks become load errors."""
        kvs = [kv for kv, _ in self._layers.values()]
        views = [view if self._in_place else self._staging(view, len(pairs))
                 for _, view in self._layers.values()]
        blocks = {blk for _, blk in pairs}
        groups = min(groups, len(views))
        ends = [len(views) * (g + 1) // groups for g in range(groups)]
        tasks, failed = [], False
        try:
            units = self._units(pairs, views)
            for g, end in enumerate(ends):
                first = ends[g - 1] if g else 0
                tasks.append(self._store.load_shards(
                    units, keep=kvs + views, tensors=(first, end - first) if groups > 1 else None))
        except KvsError as e:
            logger.warning("kvshare: load of %d blocks not submitted: %s", len(blocks), e)
            self._load_failed(blocks)
            if not tasks:
                return None
            failed = True
        staged = {} if self._in_place or failed else dict(zip(self._layers, views))
        rows = None if self._in_place else self._rows(views[0], pairs)
        ld = _Load(tasks, ends, blocks, rows, staged)
        ld.failed = failed
        return ld

    def _load_failed(self, blocks):
        """blocks' load failed: reported to vLLM, which recomputes them."""
        self._errors |= blocks
        self._count("load_errors", 1)
        self._count("recomputed_tokens", len(blocks) * self._block)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        self._idle = meta.idle  # for this step's get_finished
        if self._store is None:  # shut down: nothing loads, and vLLM is told so
            for req_id, pairs in meta.loads + meta.async_loads:
                self._load_failed({blk for _, blk in pairs})
            self._async_done |= {req_id for req_id, _ in meta.async_loads}
            return
        for req_id, pairs in meta.async_loads:  # waited for by get_finished
            ld = self._submit_load(pairs)
            if ld is None:
                self._async_done.add(req_id)
            else:
                self._async[req_id] = ld
                self._count("async_loaded_blocks", len(pairs))
                self._count("async_loaded_bytes", len(pairs) * self._rank_bytes)
        pairs = [p for _, req_pairs in meta.loads for p in req_pairs]
        if not pairs:
            return
        self._loading_reqs = {req_id for req_id, _ in meta.loads}
        self._loading = self._submit_load(pairs, self._load_groups)
        if self._loading is None or self._loading.failed:
            self._tainted |= self._loading_reqs
        else:
            self._count("loaded_blocks", len(pairs))
            self._count("loaded_bytes", len(pairs) * self._rank_bytes)

    def _wait_load(self, upto):
        """Wait for the step's load's tasks before upto, in order, each once;
        the first failure reports its blocks to vLLM and leaves nothing to
        scatter (the later tasks are still waited for)."""
        ld = self._loading
        while ld.waited < min(upto, len(ld.tasks)):
            task = ld.tasks[ld.waited]
            ld.waited += 1
            try:
                self._store.wait(task)
            except KvsError as e:
                if ld.failed:
                    continue
                ld.failed = True
                logger.warning("kvshare: a load failed (%s): %d blocks are recomputed", e,
                               len(ld.blocks))
                self._load_failed(ld.blocks)
                self._tainted |= self._loading_reqs
                ld.staged.clear()

    def _scatter(self, ld, name):
        """Staged: a layer's blocks of ld into its KV, on its stream."""
        shards = ld.staged.pop(name, None)
        if shards is not None:
            self._layers[name][1].index_copy_(0, ld.rows, shards)

    def wait_for_layer_load(self, layer_name):
        """The task of the layer's group and those before it waited for; the
        layer scattered where staged."""
        ld = self._loading
        if ld is not None:
            self._wait_load(bisect.bisect_right(ld.ends, self._layer_index[layer_name]) + 1)
            self._scatter(ld, layer_name)

    def _finish_load(self):
        """The step's load done and scattered: layers the forward never waited
        for included."""
        if self._loading is not None:
            self._wait_load(len(self._loading.tasks))
            for name in list(self._loading.staged):
                self._scatter(self._loading, name)
            self._loading = None

    def get_finished(self, finished_req_ids):
        """The requests whose asynchronous loads ended since the last call,
        each with its KV in place (scattered where staged) or its blocks
        reported as load errors (get_block_ids_with_load_errors, called
        after this in the same pass): every one, aborted requests included
        (vLLM frees their blocks only then).  Waits only in a step that
        computes nothing, IDLE_WAIT_S at most, for the oldest load; a load
        still running is asked again next step, and its deadline
        (timeout_ms) ends it.  Saves end within their step: none is ever
        reported."""
        done, self._async_done = self._async_done, set()
        # a step that computes nothing sleeps for the oldest load (IDLE_WAIT_S)
        wait_s = IDLE_WAIT_S if self._idle and not done else 0
        self._idle = False
        for req_id, ld in list(self._async.items()):
            try:
                t, wait_s = wait_s, 0
                task = ld.tasks[0]  # one task: an asynchronous load is waited for whole
                if not (self._store.wait(task, t) if t else self._store.check(task)):
                    continue
            except KvsError as e:
                logger.warning("kvshare: the load of %s failed (%s): %d blocks are "
                               "recomputed", req_id, e, len(ld.blocks))
                self._load_failed(ld.blocks)
                ld.staged.clear()
            for name in list(ld.staged):
                self._scatter(ld, name)
            del self._async[req_id]
            done.add(req_id)
        return None, done or None

    def _saves(self):
        """This step's (kvshare id, vLLM block id) pairs to save: not those of
        a request whose loads failed (its new KV, from the failed layer on, was
        computed over KV that is not the stored one: vLLM recomputes it, and
        the scheduler saves it then)."""
        meta = self._get_connector_metadata()
        return [p for req_id, req_pairs in meta.saves if req_id not in self._tainted
                for p in req_pairs]

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Nothing per layer: a shard holds every layer, dumped by
        wait_for_save once the forward computed them all."""

    def _submit_save(self, pairs):
        """Dump the rank's heads of pairs' blocks, every layer (the forward is
        over): in place, or gathered into staging buffers on the layers'
        stream, the dump waiting for the gathers' CUDA event."""
        kvs = [kv for kv, _ in self._layers.values()]
        views, event = [view for _, view in self._layers.values()], None
        if not self._in_place:
            rows = self._rows(views[0], pairs)
            views = [view.index_select(0, rows).contiguous() for view in views]
            if views[0].is_cuda:
                event = torch.cuda.Event()
                event.record()
        try:
            self._saving.append(self._store.dump_shards(self._units(pairs, views),
                                                        keep=kvs + views, cuda_event=event))
        except KvsError as e:
            logger.warning("kvshare: save of %d blocks not submitted: %s", len(pairs), e)
            self._count("save_errors", 1)

    def wait_for_save(self):
        self._finish_load()
        pairs = self._saves() if self._store is not None else []
        if pairs:
            self._submit_save(pairs)
            self._count("saved_blocks", len(pairs))
        for task in self._saving:
            try:
                self._store.wait(task)
            except KvsError as e:
                logger.warning("kvshare: a save failed (%s): those blocks stay unstored", e)
                self._count("save_errors", 1)
        self._saving = []
        self._loading_reqs, self._tainted = set(), set()

    def get_block_ids_with_load_errors(self):
        errors, self._errors = self._errors, set()
        return errors

    def get_kv_connector_stats(self):
        if self.role != KVConnectorRole.WORKER or self._store is None:
            return None
        st = self._store.stats()
        now = {k: st[k] for k in ("load_hits", "owner_reads", "shards_loaded",
                                  "shards_dumped", "dump_dedup", "backend_writes")}
        # a backend that is down (redis_start_degraded=1) shows here, not
        # only in the rate-limited log
        now["backend_read_errors"], now["backend_write_errors"] = (st["read_errors"],
                                                                   st["write_errors"])
        data = {k: v - self._last.get(k, 0) for k, v in now.items()}
        self._last = now
        data.update(self._counts)
        self._counts = {}
        stats = KVShareStats(data=data)
        return None if stats.is_empty() else stats

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return KVShareStats(data=dict(data or {}))

    def _flush(self, store):
        """A worker's saves into the backend before its store closes: the dump
        tasks still running waited for, then Store.flush, all within
        kvshare_flush_timeout_s.  Logs (WARNING) what is left, or why it could
        not tell; never raises."""
        deadline = time.monotonic() + self._flush_s
        saving, self._saving = self._saving, []
        try:
            for task in saving:  # a step whose wait_for_save never came
                try:
                    store.wait(task, max(0.0, deadline - time.monotonic()))
                except KvsError as e:
                    logger.warning("kvshare: a save failed (%s): those blocks stay unstored", e)
            left = store.flush(max(0.0, deadline - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - shutdown goes on: the store is closed next
            # a block's write given up (the backend's error), a library without
            # kvs_store_flush (EOPNOTSUPP), ...
            logger.warning("kvshare: shutdown: flushing the saved blocks to the backend "
                           "(cache %s): %s", store.unique_id, e)
            return
        if left:
            logger.warning("kvshare: shutdown: %d saved blocks were not in the backend after "
                           "%g s (%s): they stay in the node's cache %s, for its other ranks "
                           "or its next opener to write", left, self._flush_s,
                           EXTRA_FLUSH_TIMEOUT, store.unique_id)

    def shutdown(self):
        """Flush a worker's saves (bounded, _flush), then close the store: its
        close drains the tasks still running, each bounded by its deadline
        (timeout_ms).  Never raises: a failure is logged at WARNING."""
        store, self._store = self._store, None
        if store is None:
            return
        if self.role == KVConnectorRole.WORKER:
            self._flush(store)
        try:
            store.close()
        except Exception as e:  # noqa: BLE001 - nothing raises out of an engine's shutdown
            logger.warning("kvshare: shutdown: closing the store failed: %s", e)


__all__ = ["KVShareConnector", "KVShareMetadata", "KVShareStats"]
