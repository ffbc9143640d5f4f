"""Tests of the client's routing in a sharded cluster.

The Go test (client_test.go's TestPythonClient) starts fake servers of a
cluster of shards (internal/shardfake): TOLLGATE_SHARDED lists those that
answer the shard map, TOLLGATE_SHARDED_NOMAP those that refuse it; it then
counts the calls that reached a server not leading the pool's shard. Each
run (blocking, then asyncio) has its own cluster: TOLLGATE_SHARDED_AIO and
TOLLGATE_SHARDED_NOMAP_AIO.
"""

import asyncio
import os
import unittest

import tollgate
import tollgate.aio

POOLS = ["pool-%d" % i for i in range(16)]
NEEDS = "run by TestPythonClient, which starts the fake servers"


class ShardOfTest(unittest.TestCase):
    def test_vectors(self):
        """The vectors of proto/tollgate/v1/shard (its test and docs/ha.md)."""
        for pool, count, want in [("", 16, 5), ("a", 16, 12), ("orders-db", 64, 21), ("pool-7", 64, 39),
                                  ("orders-db", 1, 0), ("orders-db", 0, 0),
                                  ("日本", 7, 1), ("名前", 256, 80)]:  # UTF-8: Go's shard.Of gives 1, 80
            self.assertEqual(tollgate.shard_of(pool, count), want, (pool, count))


class RoutingTest(unittest.TestCase):
    """Given one server, calls about pools of every shard reach the pool's
    owner: straight from the shard map, or after one NOT_LEADER answer per
    pool when the map is refused (the answer is remembered)."""

    def run_blocking(self, env):
        addrs = os.environ.get(env, "")
        if not addrs:
            self.skipTest(NEEDS)
        with tollgate.Client(addrs.split(",")[0]) as c:
            for pool in POOLS:
                self.assertEqual(c.take(pool, tokens=2).tokens, 2)
                with c.lease(pool, ttl=3) as lease:
                    self.assertEqual(lease.pool, pool)
                self.assertEqual(c.take(pool).tokens, 1)

    def run_aio(self, env):
        addrs = os.environ.get(env, "")
        if not addrs:
            self.skipTest(NEEDS)

        async def main():
            async with tollgate.aio.Client(addrs.split(",")[0]) as c:
                for pool in POOLS:
                    self.assertEqual((await c.take(pool, tokens=2)).tokens, 2)
                    async with c.lease(pool, ttl=3) as lease:
                        self.assertEqual(lease.pool, pool)
                    self.assertEqual((await c.take(pool)).tokens, 1)

        asyncio.run(main())

    def test_by_the_shard_map(self):
        self.run_blocking("TOLLGATE_SHARDED")

    def test_by_not_leader_answers(self):
        self.run_blocking("TOLLGATE_SHARDED_NOMAP")

    def test_aio_by_the_shard_map(self):
        self.run_aio("TOLLGATE_SHARDED_AIO")

    def test_aio_by_not_leader_answers(self):
        self.run_aio("TOLLGATE_SHARDED_NOMAP_AIO")


if __name__ == "__main__":
    unittest.main()
