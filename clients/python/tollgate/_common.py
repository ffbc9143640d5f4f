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


class Router:
    """Which server a call goes to: the one that answered last, moved by a
    NOT_LEADER refusal to the leader it names, and by a connection that
    fails to the next address. A refusal with NOT_LEADER means the server
    applied nothing, so the call is sent again; so is one that found no
    server listening."""

    def __init__(self, addresses):
        self.addresses = parse_addresses(addresses)
        self.current = self.addresses[0]

    def next_step(self, err, attempt, tried):
        """After err (a TollgateError) on attempt number attempt: the delay
        before the next attempt, or raise the error to give to the caller."""
        if err.reason == "NOT_LEADER":
            leader = err.metadata.get("leader", "")
            if leader:
                if leader not in self.addresses:
                    self.addresses.append(leader)
                self.current = leader
                return 0 if attempt < 2 * len(self.addresses) else 0.1
            return err.retry_after or 0.1
        if err.code == grpc.StatusCode.UNAVAILABLE and not err.reason:
            tried[self.current] = err.message
            i = self.addresses.index(self.current) if self.current in self.addresses else -1
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
