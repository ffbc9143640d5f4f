"""The asyncio client, on grpc.aio: the same calls as tollgate.Client.

    async with tollgate.aio.Client("127.0.0.1:7070") as client:
        async with client.lease("orders-db") as lease:
            await write(fencing_token=lease.fencing_token)
"""

import asyncio
import time

import grpc

from tollgate import _common
from tollgate._client import Taken
from tollgate._errors import LeaseLost, TollgateError, from_rpc_error
from tollgate.v1 import admin_pb2_grpc, cluster_pb2, limiter_pb2, limiter_pb2_grpc


class Client:
    """tollgate.Client for asyncio: the same arguments; its methods are
    coroutines, and a lease is renewed by a task."""

    def __init__(self, addresses, credentials=None, token=None, client_id=None, timeout=10.0):
        self._router = _common.Router(addresses)
        self._credentials = credentials
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self.client_id = client_id or _common.default_client_id()
        self.timeout = timeout
        self._channels = {}

    def _channel(self, address):
        ch = self._channels.get(address)
        if ch is None:
            if self._credentials is not None:
                ch = grpc.aio.secure_channel(address, self._credentials)
            else:
                ch = grpc.aio.insecure_channel(address)
            self._channels[address] = ch
        return ch

    def _stub(self, address):
        return limiter_pb2_grpc.LimiterServiceStub(self._channel(address))

    async def _read_map(self, pool):
        """Reads the shard map when the router wants it before a call about pool."""
        if not self._router.map_wanted(pool):
            return
        try:
            resp = await admin_pb2_grpc.AdminServiceStub(self._channel(self._router.current)).GetCluster(
                cluster_pb2.GetClusterRequest(), timeout=min(self.timeout, 2.0), metadata=self._metadata)
        except grpc.aio.AioRpcError:
            resp = None
        self._router.set_map(resp)

    async def _call(self, method, request, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        tried, attempt = {}, 0
        pool = getattr(request, "pool", None)
        while True:
            await self._read_map(pool)
            address = self._router.address_for(pool)
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                return await getattr(self._stub(address), method)(
                    request, timeout=remaining, metadata=self._metadata)
            except grpc.aio.AioRpcError as e:
                err = from_rpc_error(e)
                attempt += 1
                delay = self._router.next_step(err, attempt, tried, address, pool)
                if _common.out_of_time(deadline):
                    raise err from None
                await asyncio.sleep(delay)

    def lease(self, pool, weight=1, ttl=_common.DEFAULT_TTL, wait=None, priority=0, description="",
              no_wait=False):
        """A Lease, acquired by async with (or await lease.acquire())."""
        return Lease(self, pool, weight, ttl, wait, priority, description, no_wait)

    async def take(self, pool, tokens=1, max_wait=None):
        resp = await self._call("Take", _common.take_request(pool, tokens, max_wait),
                                self.timeout + (max_wait or 0))
        return Taken(resp.tokens, resp.waited.ToNanoseconds() / 1e9)

    async def close(self):
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False


class Lease:
    """tollgate.Lease for asyncio: lost is an asyncio.Event."""

    def __init__(self, client, pool, weight, ttl, wait, priority, description, no_wait):
        self._client = client
        self.pool = pool
        self._req = _common.acquire_request(pool, weight, ttl, wait, priority, client.client_id,
                                            description, no_wait)
        self._wait = wait
        self._lease = None
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._task = None

    id = property(lambda self: self._lease.id)
    fencing_token = property(lambda self: self._lease.fencing_token)
    weight = property(lambda self: self._lease.weight)
    resources = property(lambda self: [r.id for r in self._lease.resources])
    ttl = property(lambda self: self._lease.ttl.ToNanoseconds() / 1e9)

    async def acquire(self):
        timeout = None if self._wait is None else self._wait + self._client.timeout
        if self._req.no_wait:
            timeout = self._client.timeout
        sent = time.monotonic()
        self._lease = (await self._client._call("Acquire", self._req, timeout)).lease
        base = _common.granted_at(sent, time.monotonic(), self.ttl)
        self._deadline = base + self.ttl - _common.safety_margin(self.ttl)
        self._renewed = base
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())
        return self

    def _lose(self, why):
        self.lost_reason = why
        self.lost.set()

    async def _keep_alive(self):
        while True:
            await asyncio.sleep(max(0, self._renewed + self.ttl / 3 - time.monotonic()))
            while True:
                sent = time.monotonic()
                if sent >= self._deadline:
                    self._lose("lease %s of pool %s could not be renewed before its deadline"
                               % (self.id, self.pool))
                    return
                try:
                    resp = await self._client._call("Renew", _common.renew_request(self._lease, self.ttl),
                                                    min(self.ttl / 3, self._deadline - sent))
                except TollgateError as e:
                    if e.code == grpc.StatusCode.NOT_FOUND:
                        self._lose(e.message)
                        return
                    await asyncio.sleep(min(0.2, self.ttl / 10))
                    continue
                self._lease = resp.lease
                self._renewed = sent
                self._deadline = sent + self.ttl - _common.safety_margin(self.ttl)
                break

    def check(self):
        if self.lost.is_set():
            raise LeaseLost(grpc.StatusCode.NOT_FOUND, self.lost_reason, "LEASE_LOST",
                            {"pool": self.pool, "lease_id": self.id})

    async def release(self):
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._task = None
        try:
            await self._client._call("Release", limiter_pb2.ReleaseRequest(pool=self.pool, lease_id=self.id),
                                     self._client.timeout)
        except TollgateError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise
            self.lost_reason = self.lost_reason or e.message
            self.lost.set()
        self.check()

    async def __aenter__(self):
        return await self.acquire()

    async def __aexit__(self, exc_type, exc, tb):
        try:
            await self.release()
        except LeaseLost:
            if exc is None:
                raise
        return False
