"""What the blocking and the asyncio clients share: addresses, requests,
the routing of a refused call, and a lease's local deadline."""

import os
import socket
import time

import grpc
from google.protobuf import duration_pb2

from tollgate._errors import TollgateError
from tollgate.v1 import limiter_pb2

DEFAULT_PORT = 7070
DEFAULT_TTL = 15.0
# A holder treats its lease as lost this long before its expiry by its own
# clock when it cannot renew (a tenth of the TTL, at least 100 ms): the
# server's clock and the network may be that much behind.
MIN_SAFETY_MARGIN = 0.1


def parse_addresses(addresses):
    """A list of host:port from "a:1,b:2" or a list; a missing port is 7070."""
    if isinstance(addresses, str):
        addresses = addresses.split(",")
    out = []
    for a in addresses:
        a = a.strip()
        if not a:
            continue
        if "://" in a:
            raise ValueError("server address %r has a scheme: give host:port (for example %s)"
                             % (a, a.split("://", 1)[1].rstrip("/")))
        host, sep, port = a.rpartition(":")
        if not sep or "]" in port:  # no port, or a bare [v6] address
            a = "%s:%d" % (a, DEFAULT_PORT)
        elif not port.isdigit():
            raise ValueError("server address %r: the port must be a number" % a)
        out.append(a)
    if not out:
        raise ValueError("no server address given")
    return out


def default_client_id():
    return "python@%s-%d" % (socket.gethostname(), os.getpid())


def duration(seconds):
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def safety_margin(ttl):
    return max(ttl / 10, MIN_SAFETY_MARGIN)


def granted_at(sent, received, ttl):
    """When, by this process's clock, a lease answered at received to a
    call sent at sent counts from: the send time, unless the call waited in
    the pool's queue longer than the safety margin; then the answer's time,
    since the grant came at most one network transit before it, which the
    margin covers."""
    return sent if received - sent <= safety_margin(ttl) else received


def acquire_request(pool, weight, ttl, wait, priority, client_id, description, no_wait):
    req = limiter_pb2.AcquireRequest(pool=pool, weight=weight, ttl=duration(ttl), priority=priority,
                                     client_id=client_id, description=description, no_wait=no_wait)
    if wait is not None:
        req.wait_timeout.CopyFrom(duration(wait))
    return req


def renew_request(lease, ttl):
    """A renew that also re-adopts the lease after a server restart or a
    failover: it carries what was granted and the latest receipt."""
    return limiter_pb2.RenewRequest(
        pool=lease.pool, lease_id=lease.id, ttl=duration(ttl), weight=lease.weight,
        client_id=lease.client_id, description=lease.description, priority=lease.priority,
        resource_ids=[r.id for r in lease.resources], expiry_receipt=lease.expiry_receipt)


def take_request(pool, tokens, max_wait):
    req = limiter_pb2.TakeRequest(pool=pool, tokens=tokens)
    if max_wait is not None:
        req.max_wait.CopyFrom(duration(max_wait))
    return req


def shard_of(pool, count):
    """The shard of the pool named pool in a cluster of count shards
    (GetCluster's shard_count): FNV-1a-32 of the name's UTF-8 bytes, mod
    count. A count below 2 means one shard, 0."""
    if count <= 1:
        return 0
    h = 0x811C9DC5
    for b in pool.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h % count


# MAX_ROUTES bounds the pools whose server a client remembers from
# NOT_LEADER answers; past it, it forgets them all and learns again.
MAX_ROUTES = 4096
# MAP_REFRESH is the least time between two reads of the shard map (s).
MAP_REFRESH = 1.0


class Router:
    """Which server a call goes to. A call about a pool goes to the server
    that leads the pool's shard: the one a NOT_LEADER answer named last for
    that pool, else the owner of its shard in the cluster's shard map
    (GetCluster, which the client reads before its first call about a pool
    and again, at most once a second, after a NOT_LEADER), else the server
    that answered last. A NOT_LEADER refusal means the server applied
    nothing, so the call is sent again, to the server it names; so is one
    that found no server listening, to the next address. Without an admin
    token on a server that checks them, the map cannot be read, and the
    answers alone route the calls."""

    def __init__(self, addresses):
        self.addresses = parse_addresses(addresses)
        self.current = self.addresses[0]
        self._routes = {}  # pool -> the server a NOT_LEADER answer named
        self._map = None  # (shard_count, [owner of each shard])
        self._stale = True
        self._map_read_at = None

    def map_wanted(self, pool):
        """Whether the client should read the shard map (from
        self.current, which a NOT_LEADER answer moves to the server it
        names) before a call about pool: never for a call about no
        pool, and at most once every MAP_REFRESH."""
        if pool is None or not self._stale:
            return False
        now = time.monotonic()
        if self._map_read_at is not None and now - self._map_read_at < MAP_REFRESH:
            return False
        self._map_read_at = now
        return True

    def set_map(self, resp):
        """Takes the shard map of a GetClusterResponse (None: it was
        refused, and the answers route the calls until the next read)."""
        self._stale = False
        if resp is None or resp.shard_count <= 1:
            return
        owners = [""] * resp.shard_count
        for o in resp.shards:
            if 0 <= o.shard < len(owners):
                owners[o.shard] = o.moving_to or o.owner
        self._map = (resp.shard_count, owners)

    def address_for(self, pool):
        """The server a call about pool (None: about no pool) goes to."""
        if pool is None:
            return self.current
        routed = self._routes.get(pool)
        if routed:
            return routed
        if self._map is not None:
            count, owners = self._map
            owner = owners[shard_of(pool, count)]
            if owner:
                return owner
        return self.current

    def next_step(self, err, attempt, tried, address=None, pool=None):
        """After err (a TollgateError) from address (None: self.current) on
        attempt number attempt of a call about pool (None: about no pool):
        the delay before the next attempt, or raise the error to give to
        the caller."""
        if address is None:
            address = self.current
        if err.reason == "NOT_LEADER":
            leader = err.metadata.get("leader", "")
            if pool is not None:
                self._stale = True
            if leader:
                if leader not in self.addresses:
                    self.addresses.append(leader)
                self.current = leader  # a server of the cluster that answers
                if pool is not None:
                    if len(self._routes) >= MAX_ROUTES:
                        self._routes.clear()
                    self._routes[pool] = leader
                return 0 if attempt < 2 * len(self.addresses) else 0.1
            if pool is not None:
                self._routes.pop(pool, None)
            return err.retry_after or 0.1
        if err.code == grpc.StatusCode.UNAVAILABLE and not err.reason:
            tried[address] = err.message
            if pool is not None:
                self._routes.pop(pool, None)
                if self._map is not None:
                    count, owners = self._map
                    owners[shard_of(pool, count)] = ""
            i = self.addresses.index(address) if address in self.addresses else -1
            self.current = self.addresses[(i + 1) % len(self.addresses)]
            if len(tried) >= len(self.addresses) and attempt >= 2 * len(self.addresses):
                raise unreachable(self.addresses, tried)
            return 0.05 if attempt >= len(self.addresses) else 0
        raise err


def unreachable(addresses, tried):
    last = "; ".join("%s: %s" % (a, m) for a, m in tried.items())
    return TollgateError(grpc.StatusCode.UNAVAILABLE,
                         "no Tollgate server answered at %s (is one running there?); %s"
                         % (", ".join(addresses), last))


def out_of_time(deadline):
    return deadline is not None and time.monotonic() >= deadline
