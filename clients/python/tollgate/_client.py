"""The blocking client: Client, and the Lease it hands out."""

import threading
import time
from collections import namedtuple

import grpc

from tollgate import _common
from tollgate._errors import LeaseLost, TollgateError, from_rpc_error
from tollgate.v1 import admin_pb2_grpc, cluster_pb2, limiter_pb2, limiter_pb2_grpc

Taken = namedtuple("Taken", ["tokens", "waited"])
Taken.__doc__ = "Tokens granted by Client.take, and how long the call waited for them (seconds)."


class Client:
    """A connection to a Tollgate server, or to the servers of a cluster.

        client = tollgate.Client("127.0.0.1:7070")
        with client.lease("orders-db") as lease:
            write(fencing_token=lease.fencing_token)

    addresses is "host:port", "a:7070,b:7070" or a list (a missing port is
    7070): a call about a pool goes to the server that leads the pool's
    shard, found in the cluster's shard map or from a NOT_LEADER answer
    naming it (see _common.Router); an address where no server listens
    sends the call to the next one. credentials are
    grpc.ChannelCredentials (grpc.ssl_channel_credentials(...)) for TLS;
    token is the admin token, sent as a bearer token. client_id names this
    process to operators (default python@HOST-PID). timeout bounds every
    call but an acquire's wait in the queue. A Client is safe to share
    between threads; close() closes its channels.
    """

    def __init__(self, addresses, credentials=None, token=None, client_id=None, timeout=10.0):
        self._router = _common.Router(addresses)
        self._credentials = credentials
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self.client_id = client_id or _common.default_client_id()
        self.timeout = timeout
        self._channels = {}
        self._mu = threading.Lock()

    def _channel(self, address):
        with self._mu:
            ch = self._channels.get(address)
            if ch is None:
                if self._credentials is not None:
                    ch = grpc.secure_channel(address, self._credentials)
                else:
                    ch = grpc.insecure_channel(address)
                self._channels[address] = ch
            return ch

    def _stub(self, address):
        return limiter_pb2_grpc.LimiterServiceStub(self._channel(address))

    def _read_map(self, pool):
        """Reads the shard map when the router wants it before a call about pool."""
        if not self._router.map_wanted(pool):
            return
        try:
            resp = admin_pb2_grpc.AdminServiceStub(self._channel(self._router.current)).GetCluster(
                cluster_pb2.GetClusterRequest(), timeout=min(self.timeout, 2.0), metadata=self._metadata)
        except grpc.RpcError:
            resp = None
        self._router.set_map(resp)

    def _call(self, method, request, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        tried, attempt = {}, 0
        pool = getattr(request, "pool", None)
        while True:
            self._read_map(pool)
            address = self._router.address_for(pool)
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                return getattr(self._stub(address), method)(
                    request, timeout=remaining, metadata=self._metadata)
            except grpc.RpcError as e:
                err = from_rpc_error(e)
                attempt += 1
                delay = self._router.next_step(err, attempt, tried, address, pool)
                if _common.out_of_time(deadline):
                    raise err from None
                time.sleep(delay)

    def lease(self, pool, weight=1, ttl=_common.DEFAULT_TTL, wait=None, priority=0, description="",
              no_wait=False):
        """A Lease of weight permits of pool, acquired when a with block
        enters it (or by acquire()): it waits in the pool's queue at most
        wait seconds (None: until granted), or not at all with no_wait."""
        return Lease(self, pool, weight, ttl, wait, priority, description, no_wait)

    def take(self, pool, tokens=1, max_wait=None):
        """Take tokens from pool's token bucket, waiting at most max_wait
        seconds for them (None: the server's default); returns Taken.
        Raises TollgateError (RESOURCE_EXHAUSTED) when they cannot come in time."""
        resp = self._call("Take", _common.take_request(pool, tokens, max_wait),
                          self.timeout + (max_wait or 0))
        return Taken(resp.tokens, resp.waited.ToNanoseconds() / 1e9)

    def close(self):
        with self._mu:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Lease:
    """A lease of permits from a pool. While it is held a thread renews it
    every third of its TTL; a renewal that finds it gone (expired,
    revoked, not re-adopted after a restart), or none that succeeds before
    its expiry less a safety margin by this process's clock, loses it:
    lost is set, lost_reason says why, and check() and release() raise
    LeaseLost. The work it protects must then stop: another holder may now
    have the permits. Pass fencing_token to the protected system."""

    def __init__(self, client, pool, weight, ttl, wait, priority, description, no_wait):
        self._client = client
        self.pool = pool
        self._req = _common.acquire_request(pool, weight, ttl, wait, priority, client.client_id,
                                            description, no_wait)
        self._wait = wait
        self._lease = None
        self.lost = threading.Event()
        self.lost_reason = ""
        self._stop = threading.Event()
        self._thread = None
        self._mu = threading.Lock()

    @property
    def id(self):
        return self._lease.id

    @property
    def fencing_token(self):
        """Strictly increasing per pool, across restarts and failovers."""
        return self._lease.fencing_token

    @property
    def weight(self):
        return self._lease.weight

    @property
    def resources(self):
        """The ids of the instances the lease holds (active and passive pools)."""
        return [r.id for r in self._lease.resources]

    @property
    def ttl(self):
        return self._lease.ttl.ToNanoseconds() / 1e9

    def acquire(self):
        """Wait for the lease; raises TollgateError when it is not granted."""
        timeout = None if self._wait is None else self._wait + self._client.timeout
        if self._req.no_wait:
            timeout = self._client.timeout
        sent = time.monotonic()
        self._lease = self._client._call("Acquire", self._req, timeout).lease
        base = _common.granted_at(sent, time.monotonic(), self.ttl)
        self._deadline = base + self.ttl - _common.safety_margin(self.ttl)
        self._renewed = base
        self._thread = threading.Thread(target=self._keep_alive, name="tollgate-lease-%s" % self.id,
                                        daemon=True)
        self._thread.start()
        return self

    def _lose(self, why):
        self.lost_reason = why
        self.lost.set()

    def _keep_alive(self):
        while not self._stop.wait(max(0, self._renewed + self.ttl / 3 - time.monotonic())):
            while True:
                sent = time.monotonic()
                if sent >= self._deadline:
                    self._lose("lease %s of pool %s could not be renewed before its deadline"
                               % (self.id, self.pool))
                    return
                try:
                    with self._mu:
                        req = _common.renew_request(self._lease, self.ttl)
                    resp = self._client._call("Renew", req, min(self.ttl / 3, self._deadline - sent))
                except TollgateError as e:
                    if e.code == grpc.StatusCode.NOT_FOUND:
                        self._lose(e.message)
                        return
                    if self._stop.wait(min(0.2, self.ttl / 10)):
                        return
                    continue
                with self._mu:
                    self._lease = resp.lease
                self._renewed = sent
                self._deadline = sent + self.ttl - _common.safety_margin(self.ttl)
                break

    def check(self):
        """Raise LeaseLost if the lease was lost."""
        if self.lost.is_set():
            raise LeaseLost(grpc.StatusCode.NOT_FOUND, self.lost_reason, "LEASE_LOST",
                            {"pool": self.pool, "lease_id": self.id})

    def release(self):
        """Stop renewing and release the lease. Raises LeaseLost when it was
        lost while held: the work it protected may have overlapped another's."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            self._client._call("Release", limiter_pb2.ReleaseRequest(pool=self.pool, lease_id=self.id),
                               self._client.timeout)
        except TollgateError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise
            self.lost_reason = self.lost_reason or e.message
            self.lost.set()
        self.check()

    def __enter__(self):
        return self.acquire()

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except LeaseLost:
            if exc is None:
                raise
        return False
