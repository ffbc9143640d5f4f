"""A small Tollgate lease helper for Python.

    import grpc
    from tollgate_lease import Lease

    channel = grpc.insecure_channel("127.0.0.1:7070")
    with Lease(channel, "orders-db", ttl=5.0, client_id="billing") as lease:
        write(fencing_token=lease.fencing_token)

Lease.acquire() waits in the pool's queue until the server grants the lease.
While it is held, a thread renews it every third of its TTL (Renew), so work
longer than the TTL stays protected. release() (or leaving the with block)
stops the thread and releases the lease. If a renewal fails with NOT_FOUND
(the lease expired, was revoked, or was not re-adopted after a restart),
the lease is lost: lease.lost is set, and the holder must stop, since
another client may now hold the permits. Pass lease.fencing_token to the
protected system so it can refuse writes from an older holder.

The generated stubs (tollgate/v1/*_pb2*.py) must be on sys.path; see
README.md for how to generate them with protoc.
"""

import threading

import grpc
from google.protobuf import duration_pb2

from tollgate.v1 import limiter_pb2, limiter_pb2_grpc


def _duration(seconds):
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class LeaseLost(Exception):
    """The server no longer holds the lease for us: stop the work."""


class Lease:
    """A lease of `weight` permits from a Tollgate pool."""

    def __init__(self, channel, pool, weight=1, ttl=10.0, wait=None,
                 client_id="", description=""):
        self._stub = limiter_pb2_grpc.LimiterServiceStub(channel)
        self.pool = pool
        self.weight = weight
        self.ttl = ttl
        self.wait = wait
        self.client_id = client_id
        self.description = description
        self.lease = None
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    @property
    def id(self):
        """The lease id ("<fencing token>.<tag>"): pass it back as given."""
        return self.lease.id

    @property
    def fencing_token(self):
        """Strictly increasing per pool across all grants."""
        return self.lease.fencing_token

    @property
    def resources(self):
        """The instances the lease is bound to (active and passive pools)."""
        return list(self.lease.resources)

    def acquire(self, timeout=None):
        """Wait for the lease (at most `wait` seconds in the queue, and
        `timeout` seconds for the call); raises grpc.RpcError when it is
        not granted."""
        req = limiter_pb2.AcquireRequest(
            pool=self.pool, weight=self.weight, ttl=_duration(self.ttl),
            client_id=self.client_id, description=self.description)
        if self.wait is not None:
            req.wait_timeout.CopyFrom(_duration(self.wait))
        self.lease = self._stub.Acquire(req, timeout=timeout).lease
        self._stop.clear()
        self.lost.clear()
        self._thread = threading.Thread(target=self._keep_alive, daemon=True)
        self._thread.start()
        return self

    def _keep_alive(self):
        while not self._stop.wait(self.ttl / 3):
            try:
                resp = self._stub.Renew(
                    limiter_pb2.RenewRequest(pool=self.pool, lease_id=self.lease.id,
                                             ttl=_duration(self.ttl), weight=self.weight),
                    timeout=self.ttl / 3)
                self.lease = resp.lease
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    self.lost.set()
                    return
                # UNAVAILABLE and the like: the server may be restarting;
                # try again at the next tick, while the TTL lasts.

    def check(self):
        """Raise LeaseLost if a renewal found the lease gone."""
        if self.lost.is_set():
            raise LeaseLost("lease %s of pool %s was lost" % (self.lease.id, self.pool))

    def release(self, timeout=10.0):
        """Stop renewing and release the lease. Raises LeaseLost if the
        lease was lost (or expired) while held."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.check()
        try:
            self._stub.Release(limiter_pb2.ReleaseRequest(pool=self.pool, lease_id=self.lease.id),
                               timeout=timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise LeaseLost("release of lease %s: %s" % (self.lease.id, e.details())) from e
            raise

    def __enter__(self):
        return self.acquire()

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except LeaseLost:
            if exc is None:
                raise
        return False


def sleep_while_held(lease, seconds):
    """Sleep for `seconds`, raising LeaseLost as soon as the lease is lost."""
    if lease.lost.wait(seconds):
        lease.check()
