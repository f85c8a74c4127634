"""kvshare.batch -- a framework-neutral batch interface over a Store, shaped like
the storage plugins inference engines call (docs/python.md maps vLLM's and
SGLang's onto it): keys in, one result per key out.

A key names one whole block: 16 bytes, an int (its low 128 bits), or a str
(hashed to 16 bytes with BLAKE2b, so an engine's string keys work as they are).
The value of a key is the block's tensors, as Store.load/dump take them: one
tensor of the block's bytes, or a list of shard entries.

Each key of batch_get and batch_set is its own task, all submitted before any
is waited on (the store's pipeline works on them together), so a key's failure
is that key's alone.  When the store's task queue is full (-EAGAIN) the oldest
outstanding key is waited for first: no polling.

Every task submitted is reaped, whatever happens: a task never reaped holds one
of the store's waiting_queue_depth task slots for good.  A key still running at
the timeout is reported ETIMEDOUT and handed to the store, which reaps it once it
ends (Store._abandon); a call that raises (a bad tensor) first waits for the keys
it had submitted.
"""

import collections
import errno
import hashlib

from ._lib import KvsError
from .store import _timeout_ns, block_id


def key_id(key):
    """A key's 16-byte block id."""
    if isinstance(key, str):
        return hashlib.blake2b(key.encode(), digest_size=16).digest()
    return block_id(key)


class BatchResult(list):
    """One bool per key (True: done for that key), plus errors: {index:
    KvsError} for the keys that failed other than by being absent."""

    def __init__(self, n):
        super().__init__([False] * n)
        self.errors = {}


class BatchStore:
    """Batch calls over an open Store (not owned: closing it is the caller's)."""

    def __init__(self, store, timeout=None):
        _timeout_ns(timeout)  # a bad timeout refused here, not mid-batch
        self.store = store
        self.timeout = timeout  # per key wait; None: the task's own deadline

    def batch_exists(self, keys):
        """Whether each key's block is stored (shared cache or backend)."""
        return self.store.lookup([key_id(k) for k in keys])

    def exists_prefix(self, keys):
        """How many leading keys are stored (stops at the first absent one)."""
        return self.store.lookup_prefix([key_id(k) for k in keys])

    def batch_get(self, keys, tensors):
        """Load each stored key's block into its tensors.  result[i] is True
        when loaded, False when absent or failed (then result.errors[i])."""
        ids = [key_id(k) for k in keys]
        tensors = list(tensors)
        present = self.store.lookup(ids)
        todo = [i for i, hit in enumerate(present) if hit]
        return self._run(len(ids), todo, lambda i: self.store.load([ids[i]], [tensors[i]]))

    def batch_set(self, keys, tensors):
        """Store each key's tensors as its block (a block stored already is
        skipped by the store: dumps are deduplicated).  result[i] is True when
        stored, False when failed (then result.errors[i])."""
        ids = [key_id(k) for k in keys]
        tensors = list(tensors)
        return self._run(len(ids), range(len(ids)),
                         lambda i: self.store.dump([ids[i]], [tensors[i]]))

    def _run(self, n, indices, submit):
        result = BatchResult(n)
        running = collections.deque()  # (index, Task), oldest first
        try:
            for i in indices:
                while True:
                    try:
                        running.append((i, submit(i)))
                        break
                    except KvsError as e:
                        if e.code != -errno.EAGAIN:
                            result.errors[i] = e
                            break
                        # the task queue is full: free a slot by waiting for the
                        # oldest key of this batch, else for a key an earlier
                        # batch gave up on (Store._abandon), else give up on this one
                        if running:
                            self._settle(running, result, 1)
                        elif not self.store._reap_abandoned(self.timeout):
                            result.errors[i] = e
                            break
        finally:  # also when a submit raised (a bad tensor): no key left unreaped
            self._settle(running, result)
        return result

    def _settle(self, running, result, count=None):
        """Wait for the oldest count (None: all) running keys in turn: result[i]
        True, or the key's error in result.errors[i].  Every submitted task is
        reaped, or left to the store to reap once it ends (Store._abandon): a
        key still running at the timeout (its tensors may still be written or
        read until then), and every key not yet waited for when a wait is
        interrupted."""
        try:
            while running and count != 0:
                i, task = running[0]
                try:
                    if task.wait(self.timeout):
                        result[i] = True
                    else:
                        self.store._abandon(task)
                        result.errors[i] = KvsError(-errno.ETIMEDOUT, f"batch key {i}",
                                                    f"still running after {self.timeout} s")
                except KvsError as e:
                    result.errors[i] = e
                running.popleft()
                count = None if count is None else count - 1
        except BaseException:
            for _, task in running:
                self.store._abandon(task)
            running.clear()
            raise
