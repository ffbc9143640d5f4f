"""Tollgate's Python client: leases of concurrency permits and rate tokens
from a Tollgate server.

    import tollgate

    client = tollgate.Client("127.0.0.1:7070")
    with client.lease("orders-db", ttl=10) as lease:
        write(fencing_token=lease.fencing_token)
    client.take("api.example.com", tokens=1, max_wait=2)

tollgate.aio has the same client for asyncio. Errors are TollgateError,
with the gRPC code, the server's reason (POOL_NOT_FOUND, NO_CAPACITY, ...)
and its metadata; a lease that is lost raises LeaseLost.
"""

from tollgate._client import Client, Lease, Taken
from tollgate._common import shard_of
from tollgate._errors import LeaseLost, TollgateError

__all__ = ["Client", "Lease", "LeaseLost", "Taken", "TollgateError", "shard_of"]
__version__ = "0.1.0"
