"""kvshare.store -- one rank's store (kvs_store_*) in Python terms.

A Store is opened from the key=value configuration keys of
kvs_store_config_parse (a dict, or the "k=v,k=v" string itself).  Loads and
dumps take block ids and tensors and return a Task at once; Task.wait() sleeps
in C (kvs_store_wait: a condition variable, the GIL released) until the task is
done or the timeout passes.  Nothing here polls.

Tensors.  Anything with data_ptr() and a byte size (torch: numel() *
element_size(); contiguous; on the CPU with copy_engine=host, on a CUDA device
otherwise), or a C-contiguous buffer (numpy arrays, bytearray; a read-only
buffer can be dumped -- it is copied first -- but not loaded into).  For each
shard the caller gives either one tensor of the shard's bytes (split at the
stored tensor sizes) or a list of one tensor per stored tensor of exactly its
size; for a whole block, one tensor of the block's bytes, or a list of one such
shard entry per shard.  Sizes are checked before anything reaches C: the
library writes the stored bytes into these addresses.

Dumps with dump_wait=cached complete once their shards are in the shared
cache; Store.flush() waits (bounded) until their blocks are in the backend
too, and says how many are not.

Lifetime.  The store keeps a task's tensors referenced until the task is
reaped (wait or check reports it done or failed), so the C copier never writes
into freed memory.  Store.close() -- also run by `with`, by the garbage collector and at
interpreter exit -- drains the running tasks (each bounded by its timeout_ms),
then drops those references.  A Store may be shared by threads: close() waits
for the calls other threads are making before the C store goes (a thread asleep
in wait() until its task ends or reaches its deadline), and a call made once
close has begun raises ValueError (_Handle).
"""

import array
import ctypes
import errno
import hashlib
import numbers
import operator
import struct
import threading
import weakref

from . import _abi
from ._lib import KvsError, check, lib, log_callback, versioned

UINT64_MAX = (1 << 64) - 1
_MASK128 = (1 << 128) - 1

# struct kvs_store_shard {block, shard, tensor_count, tensors} and struct
# kvs_store_tensor {addr, offset, len}, as Store._c_shards packs them; checked
# against _abi.py's (generated from kvshare.h) when this module loads.
_SHARD = struct.Struct("=16sIIQ")
_TENSOR = struct.Struct("=QQQ")


def _check_packing():
    s, t = _abi.kvs_store_shard, _abi.kvs_store_tensor
    got = (ctypes.sizeof(s), s.block.offset, s.shard.offset, s.tensor_count.offset,
           s.tensors.offset, ctypes.sizeof(t), t.addr.offset, t.offset.offset, t.len.offset)
    if got != (_SHARD.size, 0, 16, 20, 24, _TENSOR.size, 0, 8, 16):
        raise ImportError(f"kvshare: kvs_store_shard/kvs_store_tensor in _abi.py {got} are not "
                          f"what store.py packs: update _SHARD/_TENSOR with the header")


_check_packing()


def block_id(key):
    """The 16 bytes of a block id: bytes-like of length 16 as they are, an int
    as its low 128 bits, little-endian (a negative int in two's complement).
    For ids derived from anything else use stable_id: Python's hash() of a
    str or bytes differs per process (PYTHONHASHSEED), so ids made from it
    never meet across ranks or engines."""
    if isinstance(key, int) and not isinstance(key, bool):
        return (key & _MASK128).to_bytes(16, "little")
    if isinstance(key, (bytes, bytearray, memoryview)):
        b = bytes(key)
        if len(b) != 16:
            raise ValueError(f"a block id is 16 bytes, got {len(b)}")
        return b
    raise TypeError(f"a block id is 16 bytes or an int, got {type(key).__name__}")


def _part_bytes(part):
    """One part of a stable_id, framed so that no two part lists collide: a
    type tag, the length, the bytes."""
    if isinstance(part, bool) or not isinstance(part, (int, str, bytes, bytearray, memoryview)):
        raise TypeError(f"stable_id parts are int, str or bytes, not {type(part).__name__}")
    if isinstance(part, int):
        tag, b = b"i", part.to_bytes((part.bit_length() + 8) // 8, "little", signed=True)
    elif isinstance(part, str):
        tag, b = b"s", part.encode()
    else:
        tag, b = b"b", bytes(part)
    return tag + len(b).to_bytes(8, "little") + b


def stable_id(*parts, namespace=b""):
    """A 16-byte block id from parts (ints, strs, bytes), the same in every
    process, on every host and in every Python: BLAKE2b-128 of the framed parts,
    keyed with namespace (bytes or str, e.g. a model fingerprint, so that two
    models' blocks of the same tokens never share an id; longer than 64 bytes:
    hashed to 64 first)."""
    key = namespace.encode() if isinstance(namespace, str) else bytes(namespace)
    if len(key) > 64:
        key = hashlib.blake2b(key).digest()
    h = hashlib.blake2b(digest_size=16, key=key)
    for part in parts:
        h.update(_part_bytes(part))
    return h.digest()


def _block_array(blocks):
    ids = [block_id(b) for b in blocks]
    return (_abi.kvs_block_id * len(ids)).from_buffer_copy(b"".join(ids)), len(ids)


def _config_string(config):
    if isinstance(config, str):
        return config
    items = []
    for key, value in config.items():
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, (list, tuple)):
            value = ":".join(str(v) for v in value)
        value = str(value)
        if "," in value or "=" in str(key) or "," in str(key):
            raise KvsError(-errno.EINVAL, "config", f"{key}={value!r}: a value cannot hold "
                           "',', a key neither ',' nor '='")
        items.append(f"{key}={value}")
    return ",".join(items)


def _timeout_ns(timeout):
    """timeout seconds (None: none) as the nanoseconds the C waits take: None,
    infinity and anything past UINT64_MAX ns (584 years) are UINT64_MAX, which
    the library takes as no timeout (a wait's deadline saturates); never wrapped
    modulo 2**64 by ctypes.  A negative or NaN timeout is a ValueError, a
    non-number a TypeError: a caller's mistake, not a wait of 0."""
    if timeout is None:
        return UINT64_MAX
    if not isinstance(timeout, numbers.Real):
        raise TypeError(f"kvshare: a timeout is seconds (a number) or None, not {timeout!r}")
    t = float(timeout)
    if not t >= 0:  # NaN too
        raise ValueError(f"kvshare: a timeout is >= 0 seconds or None, got {timeout!r}")
    ns = t * 1e9
    return UINT64_MAX if ns >= UINT64_MAX else int(ns)


def _struct_dict(st):
    out = {}
    for name, _ in st._fields_:
        if name.startswith(("reserved", "pad")):
            continue
        v = getattr(st, name)
        out[name] = list(v) if isinstance(v, ctypes.Array) else v
    return out


def _is_region(obj):
    return not isinstance(obj, (list, tuple))


class Task:
    """A load, dump or prefetch submitted to a Store; id is the library's task
    id, numbered per store: the Task, bound to its store, is the handle to
    pass to wait and check (another store refuses it)."""

    __slots__ = ("store", "id", "kind")

    def __init__(self, store, task_id, kind):
        self.store = store
        self.id = task_id
        self.kind = kind

    def wait(self, timeout=None):
        """Store.wait(self, timeout)."""
        return self.store.wait(self, timeout)

    def check(self):
        """Store.check(self)."""
        return self.store.check(self)

    def __repr__(self):
        return f"<kvshare.Task {self.kind} {self.id}>"


class ShardList:
    """Units of Store.load_shards packed once (Store.shard_list), bound to
    their store: the C arrays of their shards and tensor addresses, kept
    alive by this object."""

    __slots__ = ("store", "c_shards", "n", "_keep")

    def __init__(self, store, c_shards, n, keep):
        self.store = store
        self.c_shards = c_shards
        self.n = n
        self._keep = keep

    def __len__(self):
        return self.n

    def __repr__(self):
        return f"<kvshare.ShardList {self.n} shards>"


def _parse(config):
    """config (a dict or the "k=v,..." string) as a kvs_store_config, the
    log callback set; KvsError naming the key when it does not parse."""
    cfg = _abi.kvs_store_config()
    lib().kvs_store_config_init(ctypes.byref(cfg))
    cfg.log = ctypes.cast(log_callback, ctypes.c_void_p).value
    err = ctypes.create_string_buffer(512)
    check(lib().kvs_store_config_parse(ctypes.byref(cfg), _config_string(config).encode(), err,
                                       len(err)),
          "kvs_store_config_parse", err.value.decode("utf-8", "replace"))
    return cfg


def check_config(config):
    """Refuse, as Store(config) would, a configuration that does not parse or
    whose backend cannot be used (kvs_store_config_check: roots missing or not
    writable, a Redis that does not answer), without opening a store: no cache
    is created or attached, no copy engine opened.  shard_size and block_size
    may be left out.  Raises KvsError with the library's lines in detail."""
    cfg = _parse(config)
    rc = lib().kvs_store_config_check(ctypes.byref(cfg))
    check(rc, f"kvs_store_config_check({cfg.cache.unique_id.decode()})",
          lib().kvs_store_last_error().decode("utf-8", "replace") if rc < 0 else "")


class _Handle:
    """A Store's C handle and its life across threads.

    kvs_store_close frees the store and detaches its cache: a call another
    thread is making at that moment would read freed memory.  So every call
    into the library is made inside `with handle as ptr:`, a use counted under
    a lock, and close() first refuses new uses (the closed store's ValueError),
    then waits until the uses in flight have returned, and only then calls
    kvs_store_close.  No call stays in C unboundedly: a wait until its task is
    done or at the task's deadline (timeout_ms from submit, at most 24 h: what
    kvs_store_close drains tasks to anyway, so a thread asleep in wait delays
    close by nothing close would not have waited for, and gets its task's
    result), ready until registration ends or its timeout, flush until its
    timeout or until every cached dump's block is written or given up (each
    write retried for timeout_ms at most), lookups as the backend's commands.
    Any thread may close, once: a second close() waits
    until the first one has closed; one interrupted (KeyboardInterrupt) while
    it waits for the uses leaves the store open.  The finalizer (garbage
    collector, interpreter exit) closes through this object, which never
    refers to the Store.

    pending: what must outlive each unreaped task (its tensors), by task id;
    abandoned: the same for the tasks nobody will wait for (Store._abandon),
    which the store reaps itself, one thread at a time (reaping).  Both are
    dropped once kvs_store_close has drained the tasks."""

    __slots__ = ("lib", "ptr", "cache", "pending", "abandoned", "reaping", "users", "_lock",
                 "_cv", "_closing", "_closed")

    def __init__(self, lib_, ptr):
        self.lib = lib_
        self.ptr = ptr
        self.cache = lib_.kvs_store_cache(ptr)
        self.pending = {}
        self.abandoned = {}
        self.reaping = threading.Lock()
        self.users = 0          # calls in flight, under _lock
        self._lock = threading.Lock()  # taken bare by each call: a C-level `with`
        self._cv = threading.Condition(self._lock)
        self._closing = False   # no new use; set by the closing thread
        self._closed = False    # kvs_store_close has returned

    def __enter__(self):
        with self._lock:
            if self._closing:
                raise ValueError("kvshare: the store is closed")
            self.users += 1
        return self.ptr

    def __exit__(self, *exc):
        with self._lock:
            self.users -= 1
            if self._closing and not self.users:
                self._cv.notify_all()

    @property
    def closed(self):
        return self._closing

    def close(self):
        with self._cv:
            while self._closing and not self._closed:  # another thread closes
                self._cv.wait()
            if self._closed:
                return
            self._closing = True
            try:
                while self.users:
                    self._cv.wait()
            except BaseException:
                self._closing = False
                self._cv.notify_all()
                raise
        self.lib.kvs_store_close(self.ptr)  # drains running tasks first
        self.pending.clear()                # ... so their tensors may go now
        self.abandoned.clear()
        with self._cv:
            self._closed = True
            self._cv.notify_all()


# Every Store opened in this process (weakly), for Store._task_id's int ids.
_stores = weakref.WeakSet()
_stores_lock = threading.Lock()


class Store:
    """One rank's kvshare store (or a watcher's: device_id=-1).

    config: a dict of kvs_store_config_parse keys (values: str, int, bool,
    or a list for the ':'-separated keys tensor_size_list, backend_roots,
    cpu_affinity_cores), or the "key=value,key=value" string.
    Raises KvsError (code, name, strerror, and the library's message in
    detail) when the configuration is bad or the open fails."""

    def __init__(self, config):
        self._lib = lib()
        self._hd = None
        cfg = _parse(config)
        self._geometry(cfg)
        self.unique_id = cfg.cache.unique_id.decode()
        self.device_id = cfg.cache.device_id

        handle = ctypes.c_void_p()
        rc = self._lib.kvs_store_open(ctypes.byref(cfg), ctypes.byref(handle))
        # every ERROR line of the failed open, not only the last one logged
        check(rc, f"kvs_store_open({self.unique_id}, device {self.device_id})",
              self._lib.kvs_store_last_error().decode("utf-8", "replace") if rc < 0
              else "")
        self._hd = _Handle(self._lib, handle.value)
        self._finalizer = weakref.finalize(self, self._hd.close)
        with _stores_lock:
            _stores.add(self)
        # copy_engine=auto is resolved at open: the host engine copies to and
        # from host memory ("cpu" tensors), CUDA to its device.  A watcher copies
        # nothing.
        engine = self._lib.kvs_store_copy_engine(self._hd.ptr)
        self._device_type = "cuda" if engine == _abi.KVS_COPY_ENGINE_CUDA else "cpu"
        self.rank = check(self._lib.kvs_cache_rank(self._hd.cache), "kvs_cache_rank")
        real = self.cache_stats()["slot_bytes"]
        if real != self.shard_bytes:
            self.close()
            raise KvsError(-errno.EINVAL, "Store", f"the cache's shard is {real} bytes, the "
                           f"binding computed {self.shard_bytes} from the configuration")

    def _geometry(self, cfg):
        """Shard, tensor and block sizes as kvs_store_open resolves them (the
        tensor table, tensor_size, block_size; the library validates them)."""
        c = cfg.cache
        if c.tensor_count:
            tensors = list(c.tensor_bytes[:c.tensor_count])
            shard = c.slot_bytes or sum(tensors)
        elif cfg.tensor_bytes and c.slot_bytes:
            shard = c.slot_bytes
            tensors = [cfg.tensor_bytes] * (shard // cfg.tensor_bytes)
        else:
            shard = c.slot_bytes
            tensors = [shard]
        spb = cfg.block_bytes // shard if cfg.block_bytes and shard else c.shards_per_block
        self.shard_bytes = shard
        self.shards_per_block = spb
        self.block_bytes = shard * spb
        self.tensor_bytes = tuple(tensors)
        offs, off = [], 0
        for t in tensors:
            offs.append(off)
            off += t
        self._tensor_offsets = tuple(offs)

    # -- lifetime --------------------------------------------------------

    def close(self):
        """Wait for the calls other threads are making (a wait until its task
        ends or its deadline passes), refusing new ones (ValueError); drain
        the running tasks (each bounded by its timeout), stop the store's
        threads, detach.  Blocks of cached dumps it could not write within
        that bound stay in the cache for the node's other ranks or its next
        opener (logged at WARNING); close says nothing of them: flush() first
        to know.  Idempotent; safe from any thread."""
        if self._hd is not None:
            self._hd.close()  # not the finalizer: it runs once, a second close must wait too
            self._finalizer.detach()

    @property
    def closed(self):
        return self._hd is None or self._hd.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, fn, *args):
        """fn(the C store, *args), as a use of the store: close waits for it
        to return; ValueError once close has begun (_Handle)."""
        with self._hd as ptr:
            return fn(ptr, *args)

    def __repr__(self):
        state = "closed" if self.closed else f"rank entry {self.rank}"
        return (f"<kvshare.Store {self.unique_id} device {self.device_id} {state}: "
                f"{self.shards_per_block} x {self.shard_bytes} B shards>")

    # -- tensors ---------------------------------------------------------

    def _region(self, obj, writable, keep):
        """(address, bytes) of one tensor; what must stay alive goes to keep."""
        if hasattr(obj, "data_ptr"):
            if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
                raise ValueError("kvshare: a tensor must be contiguous")
            dev = getattr(getattr(obj, "device", None), "type", None)
            if dev is not None and dev != self._device_type:
                raise ValueError(f"kvshare: a tensor on {obj.device}; this store's copy "
                                 f"engine takes {self._device_type} tensors")
            keep.append(obj)
            return obj.data_ptr(), obj.numel() * obj.element_size()
        try:
            m = memoryview(obj)
        except TypeError:
            raise TypeError(f"kvshare: {type(obj).__name__} is not a tensor: no data_ptr() "
                            "and no buffer protocol") from None
        if not m.c_contiguous:
            raise ValueError("kvshare: a buffer must be C-contiguous")
        m = m.cast("B")
        if m.readonly:
            if writable:
                raise ValueError("kvshare: cannot load into a read-only buffer")
            buf = (ctypes.c_char * m.nbytes).from_buffer_copy(m)
        else:
            buf = (ctypes.c_char * m.nbytes).from_buffer(m)
        keep.append(buf)
        return ctypes.addressof(buf), m.nbytes

    def _shard_addrs(self, obj, writable, keep, what):
        """Addresses of a shard's stored tensors: obj is one tensor of the
        shard's bytes, or a list with one tensor per stored tensor."""
        if _is_region(obj):
            addr, n = self._region(obj, writable, keep)
            if n != self.shard_bytes:
                raise ValueError(f"kvshare: {what}: {n} bytes, a shard is {self.shard_bytes}")
            return [addr + off for off in self._tensor_offsets]
        if len(obj) != len(self.tensor_bytes):
            raise ValueError(f"kvshare: {what}: {len(obj)} tensors, a shard has "
                             f"{len(self.tensor_bytes)}")
        addrs = []
        for t, (tensor, want) in enumerate(zip(obj, self.tensor_bytes)):
            addr, n = self._region(tensor, writable, keep)
            if n != want:
                raise ValueError(f"kvshare: {what} tensor {t}: {n} bytes, stored {want}")
            addrs.append(addr)
        return addrs

    def _task_shards(self, blocks, tensors, shard, writable, keep):
        """The (block id, shard, tensor addresses) of a task, as C arrays."""
        blocks = list(blocks)
        tensors = list(tensors)
        if len(blocks) != len(tensors):
            raise ValueError(f"kvshare: {len(blocks)} blocks, {len(tensors)} tensor entries")
        if shard is not None and not 0 <= shard < self.shards_per_block:
            raise ValueError(f"kvshare: shard {shard}, a block has {self.shards_per_block}")
        units = []  # (block id, shard, addresses)
        for i, (b, obj) in enumerate(zip(blocks, tensors)):
            bid = block_id(b)
            if shard is not None:
                units.append((bid, shard, self._shard_addrs(obj, writable, keep,
                                                            f"block {i} shard {shard}")))
            elif _is_region(obj):
                addr, n = self._region(obj, writable, keep)
                if n != self.block_bytes:
                    raise ValueError(f"kvshare: block {i}: {n} bytes, a block is "
                                     f"{self.block_bytes}")
                for s in range(self.shards_per_block):
                    base = addr + s * self.shard_bytes
                    units.append((bid, s, [base + off for off in self._tensor_offsets]))
            else:
                if len(obj) != self.shards_per_block:
                    raise ValueError(f"kvshare: block {i}: {len(obj)} shard entries, a "
                                     f"block has {self.shards_per_block}")
                for s, sobj in enumerate(obj):
                    units.append((bid, s, self._shard_addrs(sobj, writable, keep,
                                                            f"block {i} shard {s}")))
        return self._c_shards(units, keep)

    def _c_shards(self, units, keep):
        """C arrays of units (block id, shard, addresses), checked as they are
        gathered: addresses an int, the first byte of the shard's stored
        tensors in order (load_shards'), or a list of one address per stored
        tensor.  One step per unit here, the rest _pack's."""
        n, offs, spb = len(units), self._tensor_offsets, self.shards_per_block
        if not n:
            raise ValueError("kvshare: no shards")
        tc = len(offs)
        bids, shards, flat = bytearray(), array.array("I"), []
        for i, (b, shard, addrs) in enumerate(units):
            if not 0 <= shard < spb:
                raise ValueError(f"kvshare: unit {i}: shard {shard}, a block has {spb}")
            if isinstance(addrs, int) and not isinstance(addrs, bool) and addrs > 0:
                addrs = (addrs,) if tc == 1 else [addrs + off for off in offs]
            elif not isinstance(addrs, list) or len(addrs) != tc:
                raise TypeError(f"kvshare: unit {i}: an address is a positive int")
            bids += b if type(b) is bytes and len(b) == 16 else block_id(b)
            shards.append(shard)
            flat.extend(addrs)
        return self._pack(n, memoryview(bids), shards, array.array("Q", flat), keep)

    def _shards_arg(self, units, keep):
        """The C arrays of load_shards' or dump_shards' units: packed here, or
        a ShardList's (which keep then holds until the task is reaped)."""
        if not isinstance(units, ShardList):
            return self._c_shards(units, keep)
        if units.store is not self:
            raise ValueError(f"kvshare: {units!r} was packed by another store")
        keep.append(units)
        return units.c_shards, units.n

    def _pack(self, n, bids, shards, addrs, keep):
        """The C arrays of n shards the caller checked: bids (16 bytes each, a
        flat byte view), shards (n uint32, an array("I")), addrs (n *
        tensor_count 64-bit words).  Written column by column into bytearrays
        the C arrays are views of (strided memoryview stores: no Python step
        per tensor; struct.pack_into per tensor cost about 0.5 us a unit, a
        ctypes object per unit 3-5 us)."""
        tc = len(self._tensor_offsets)
        tstep = tc * _TENSOR.size
        tbuf, sbuf = bytearray(n * tstep), bytearray(n * _SHARD.size)
        c_tensors = (ctypes.c_char * len(tbuf)).from_buffer(tbuf)
        tbase = ctypes.addressof(c_tensors)
        sw, tw, bw = memoryview(sbuf).cast("Q"), memoryview(tbuf).cast("Q"), bids.cast("Q")
        si = memoryview(sbuf).cast("I")
        # struct kvs_store_shard (_SHARD): 4 words, the id's two, then shard and
        # tensor_count (32 bits each: u32 4 and 5 of 8), then the tensors
        sw[0::4], sw[1::4] = bw[0::2], bw[1::2]
        si[4::8], si[5::8] = shards, array.array("I", [tc]) * n
        sw[3::4] = array.array("Q", range(tbase, tbase + n * tstep, tstep))
        tw[0::3] = addrs  # struct kvs_store_tensor {addr, offset 0, len 0 (whole)}
        keep.append(c_tensors)  # the shards point into it until the submit copies both
        return (_abi.kvs_store_shard * n).from_buffer(sbuf), n

    def _submit(self, kind, fn, c_arg, n, *extra, keep):
        if self._hd.abandoned:  # each holds a task slot (waiting_queue_depth) until reaped
            self._reap_abandoned()
        tid = ctypes.c_uint64()
        with self._hd as ptr:  # keep registered before close can drop pending
            check(fn(ptr, c_arg, n, *extra, ctypes.byref(tid)),
                  f"kvs_store_{kind}({n} {'blocks' if kind == 'prefetch' else 'shards'})")
            self._hd.pending[tid.value] = keep
        return Task(self, tid.value, kind)

    # -- the store API ---------------------------------------------------

    def load(self, blocks, tensors, shard=None):
        """Load blocks into tensors: whole blocks (shard None; tensors[i] is one
        tensor of the block's bytes or a list of shard entries), or one shard
        of each block (layer-wise: tensors[i] is that shard's entry).
        Returns a Task.  Raises KvsError (-EAGAIN: waiting_queue_depth tasks
        outstanding; -EOPNOTSUPP: a watcher), ValueError/TypeError for tensors
        of the wrong size, kind or device."""
        keep = []
        shards, n = self._task_shards(blocks, tensors, shard, True, keep)
        return self._submit("load", self._lib.kvs_store_load, shards, n, keep=keep)

    def dump(self, blocks, tensors, shard=None, cuda_event=None):
        """Store tensors as blocks (as load, the other way).  cuda_event: a
        cudaEvent_t (int, or an object with .cuda_event such as
        torch.cuda.Event) the gathers wait for; None with copy_engine=host.
        Shards already in the cache are skipped (dumps are deduplicated).
        Returns a Task, done per dump_wait (durable: written to the backend)."""
        keep = []
        shards, n = self._task_shards(blocks, tensors, shard, False, keep)
        event = getattr(cuda_event, "cuda_event", cuda_event)
        return self._submit("dump", self._lib.kvs_store_dump, shards, n, event, keep=keep)

    def shard_list(self, units):
        """units, as load_shards takes them, checked and packed once: a
        ShardList that load_shards takes in their place, as often as needed
        (e.g. a range of tensors each time: a layer, or a group of layers, at
        a time).  shard_table packs arrays of them faster."""
        keep = []
        shards, n = self._c_shards(units, keep)
        return ShardList(self, shards, n, keep)

    def shard_table(self, blocks, shards, addrs):
        """n shards given as arrays, checked and packed into a ShardList with
        no Python step per shard or tensor: what a connector moving thousands
        of shards a step builds (shard_list takes units one by one).  blocks:
        the n block ids back to back, 16 bytes each as block_id gives them (a
        bytes-like object of n * 16 bytes); shards: the n shard numbers (a
        sequence of ints or a buffer of them); addrs: the n * tensor_count
        addresses of the shards' stored tensors, shard after shard, in a
        C-contiguous buffer of 64-bit ints (a numpy int64 array, a CPU torch
        int64 tensor's .numpy(), array.array("q")).  ValueError when the
        lengths do not agree, a shard is out of range or an address is not
        positive."""
        tc, spb = len(self._tensor_offsets), self.shards_per_block
        bids = memoryview(blocks).cast("B")
        n = len(bids) // 16
        if not n or len(bids) != 16 * n:
            raise ValueError(f"kvshare: blocks: {len(bids)} bytes, want 16 per block id")
        sh = array.array("q", shards)
        if len(sh) != n:
            raise ValueError(f"kvshare: {len(sh)} shard numbers for {n} block ids")
        if not 0 <= min(sh) <= max(sh) < spb:
            raise ValueError(f"kvshare: shards {min(sh)}..{max(sh)}, a block has {spb}")
        raw = memoryview(addrs).cast("B")
        if len(raw) != 8 * n * tc:
            raise ValueError(f"kvshare: addrs: {len(raw)} bytes, want {n} shards x {tc} "
                             "tensors x 8")
        if min(raw.cast("q")) <= 0:
            raise ValueError("kvshare: addrs: an address is not positive")
        keep = []
        shards_c, n = self._pack(n, bids, array.array("I", sh), raw.cast("Q"), keep)
        return ShardList(self, shards_c, n, keep)

    def load_shards(self, units, keep=(), tensors=None):
        """Load shards given by address, any shard of any block per unit:
        units are (block id, shard, address) with address the first byte of
        shard_bytes the shard's stored tensors fill in order (a device address
        with the cuda engine), or a ShardList of this store's (shard_list).
        What an engine's connector calls.  tensors: None copies every stored
        tensor of each shard; (first, count) only those
        (kvs_store_load_tensors: the other tensors' addresses are not used;
        KvsError -EOPNOTSUPP when the loaded library predates it, ABI
        KVSHARE_1.2).  The addresses are not checked: the caller vouches for
        them, and keep (e.g. the KV tensors they point into) is held until
        the task is reaped.  Returns a Task."""
        keep = list(keep)
        shards, n = self._shards_arg(units, keep)
        if tensors is None:
            return self._submit("load", self._lib.kvs_store_load, shards, n, keep=keep)
        first, count = (operator.index(v) for v in tensors)
        return self._submit("load", versioned("kvs_store_load_tensors"), shards, n, first, count,
                            keep=keep)

    def dump_shards(self, units, keep=(), cuda_event=None):
        """Dump shards given by address (as load_shards, the other way: units
        or a ShardList; as dump for cuda_event and completion).  Returns a
        Task."""
        keep = list(keep)
        shards, n = self._shards_arg(units, keep)
        event = getattr(cuda_event, "cuda_event", cuda_event)
        return self._submit("dump", self._lib.kvs_store_dump, shards, n, event, keep=keep)

    def prefetch(self, blocks):
        """Bring every shard of blocks into the shared cache (no copy).  Returns a Task."""
        arr, n = _block_array(blocks)
        return self._submit("prefetch", self._lib.kvs_store_prefetch, arr, n, keep=[])

    def _task_id(self, task, op):
        """The library id of task, checked before it reaches C (which would
        reap whichever task of this store has that id): a Task must be this
        store's (ValueError), an id one of this store's outstanding tasks
        (KvsError -ENOENT: unknown or already reaped).  Two stores number
        their tasks alike (task ids are per store), so an int that another
        open store also has outstanding is refused as ambiguous (ValueError:
        pass the Task).  Called inside a use: after close, the closed
        store's ValueError came first."""
        if isinstance(task, Task):
            if task.store is not self:
                raise ValueError(f"kvshare: {task!r} belongs to another store "
                                 f"({task.store!r}), not this one ({self!r})")
            tid = task.id
        else:
            tid = operator.index(task)
        if tid not in self._hd.pending:
            raise KvsError(-errno.ENOENT, f"{op}(task {tid})",
                           "not an outstanding task of this store")
        if not isinstance(task, Task):
            with _stores_lock:
                others = [o for o in _stores if o is not self and tid in o._hd.pending]
            if others:
                raise ValueError(f"kvshare: task id {tid} is outstanding in this store and "
                                 f"in {others[0]!r} as well: pass the Task object")
        return tid

    def _abandon(self, task):
        """Stop waiting for task (this store's, still running): the store
        reaps it once it has ended -- checked at each submit, waited for by
        _reap_abandoned -- keeping its tensors referenced until then; its
        outcome is reported to no one, and wait or check on it is -ENOENT.
        What BatchStore does with a key past its timeout: a task never reaped
        holds one of the store's waiting_queue_depth task slots for good."""
        keep = self._hd.pending.pop(task.id, None)
        if keep is not None:  # None: reaped already, or the store closed
            self._hd.abandoned[task.id] = keep

    def _reap_abandoned(self, timeout=0):
        """Reap the abandoned tasks that have ended; when none has and
        timeout is not 0, wait up to timeout seconds for the oldest.  True
        when one was reaped.  One thread reaps at a time (a task id is
        checked by one thread at a time, kvshare.h): without a timeout a
        thread finding another reaping returns at once."""
        hd = self._hd
        if not hd.reaping.acquire(blocking=timeout != 0):
            return False
        try:
            with hd as ptr:
                reaped = [tid for tid in list(hd.abandoned)
                          if self._lib.kvs_store_check(ptr, tid) != 1]
                if not reaped and timeout != 0 and hd.abandoned:
                    tid = next(iter(hd.abandoned))  # the oldest: dicts keep their order
                    if self._lib.kvs_store_wait(ptr, tid, _timeout_ns(timeout)) != 1:
                        reaped.append(tid)
            for tid in reaped:  # done, failed or gone: the outcome is no one's
                hd.abandoned.pop(tid, None)
            return bool(reaped)
        finally:
            hd.reaping.release()

    def _reaped(self, tid, rc, op):
        if rc == 1:
            return False
        self._hd.pending.pop(tid, None)
        check(rc, f"{op}(task {tid})")
        return True

    def wait(self, task, timeout=None):
        """Sleep until task (a Task of this store, or the id of one of its
        outstanding tasks) finishes or timeout seconds pass (None, math.inf or
        more than UINT64_MAX ns: until it finishes; its own deadline,
        timeout_ms from submit, bounds that; negative or NaN: ValueError).
        Returns True when it succeeded (it is reaped), False on timeout (still
        running); raises KvsError with the task's error (the backend's,
        -ETIMEDOUT, -KVS_EOWNERDEAD, ...) or -ENOENT for an unknown or already
        reaped task; ValueError for a Task of another store, or an id another
        open store has outstanding too (_task_id).  The GIL is released while
        it sleeps."""
        ns = _timeout_ns(timeout)
        with self._hd as ptr:
            tid = self._task_id(task, "kvs_store_wait")
            rc = self._lib.kvs_store_wait(ptr, tid, ns)
        return self._reaped(tid, rc, "kvs_store_wait")

    def check(self, task):
        """As wait with no waiting: True done, False running; raises on failure."""
        with self._hd as ptr:
            tid = self._task_id(task, "kvs_store_check")
            rc = self._lib.kvs_store_check(ptr, tid)
        return self._reaped(tid, rc, "kvs_store_check")

    def flush(self, timeout=None):
        """Wait until every block this rank acknowledged a dump_wait=cached
        dump of is in the backend, whoever writes it (kvs_store_flush: the
        complete ones are written meanwhile without the designated writers'
        grace), or until timeout seconds pass (None, math.inf or more than
        UINT64_MAX ns: no timeout, each block then ends written or its write
        given up after timeout_ms of retries; negative or NaN: ValueError).
        Returns how many of those blocks are not in the backend: 0 when all
        are (at once for a watcher, or a rank that made no cached dump:
        durable dumps need no flush), > 0 when the timeout passed first (they
        stay DIRTY in the cache and are still written, by this rank or, after
        its close, by the node's next).  Raises KvsError with the error of a
        block that left without reaching the backend since the last flush
        (its write given up: the backend's error; KVS_EINCOMPLETE: a shard of
        it was never dumped by any rank), reported once, by the flush that
        finds it, after it waited for the others (detail: how many are still
        pending); -EOPNOTSUPP when the
        loaded library predates kvs_store_flush (ABI KVSHARE_1.1).  The GIL is
        released while it sleeps; a close() from another thread waits for it."""
        ns = _timeout_ns(timeout)
        pending = ctypes.c_uint64()
        with self._hd as ptr:
            rc = versioned("kvs_store_flush")(ptr, ns, ctypes.byref(pending))
        if rc == -errno.ETIMEDOUT:
            return max(pending.value, 1)  # timed out: at least one is left
        check(rc, "kvs_store_flush", f"{pending.value} more blocks not in the backend yet"
              if rc < 0 and pending.value else "")
        return 0

    def ready(self, timeout=0):
        """Whether this rank's data plane is registered with its copy engine
        (kvs_store_ready: loads are served before, through a staging buffer),
        waiting up to timeout seconds (0: just ask; None or math.inf: until
        registration ends; the GIL is released while it sleeps).  True ready,
        False not yet; raises KvsError with the registration's error, or
        -EOPNOTSUPP for a watcher; ValueError for a negative or NaN timeout."""
        ns = _timeout_ns(timeout)
        return check(self._call(self._lib.kvs_store_ready, ns), "kvs_store_ready") == 1

    def lookup(self, blocks):
        """For each block, whether every shard of it is in the shared cache or
        the backend: a list of bools."""
        arr, n = _block_array(blocks)
        hits = (ctypes.c_bool * n)()
        check(self._call(self._lib.kvs_store_lookup, arr, n, hits), "kvs_store_lookup")
        return list(hits)

    def lookup_prefix(self, blocks):
        """How many leading blocks lookup() would hit (stops at the first miss)."""
        arr, n = _block_array(blocks)
        return check(self._call(self._lib.kvs_store_lookup_prefix, arr, n),
                     "kvs_store_lookup_prefix")

    def resident_prefix(self, blocks):
        """How many leading blocks have every shard READY in the shared cache
        (kvs_cache_lookup_prefix: a load of them copies, with no backend read
        and no wait for another rank's; stops at the first that has not)."""
        arr, n = _block_array(blocks)
        with self._hd as ptr:
            cache = self._lib.kvs_store_cache(ptr)
            return check(self._lib.kvs_cache_lookup_prefix(cache, arr, n, _abi.KVS_ALL_SHARDS),
                         "kvs_cache_lookup_prefix")

    def stats(self, node=False):
        """This rank's store counters (kvs_store_stats) as a dict, or the
        node's total (every rank, departed ones included) with node=True."""
        st = _abi.kvs_store_stats()
        rank = _abi.KVS_STATS_NODE if node else self.rank
        check(self._call(self._lib.kvs_store_stats, rank, ctypes.byref(st)), "kvs_store_stats")
        return _struct_dict(st)

    def cache_stats(self, node=False):
        """The shared cache's counters and slot census (kvs_cache_stats) as a dict."""
        st = _abi.kvs_cache_stats()
        rank = _abi.KVS_STATS_NODE if node else self.rank
        with self._hd:  # the cache is the store's: detached by its close
            rc = self._lib.kvs_cache_stats(self._hd.cache, rank, ctypes.byref(st))
        check(rc, "kvs_cache_stats")
        return _struct_dict(st)
