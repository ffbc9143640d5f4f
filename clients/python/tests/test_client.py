"""Tests of the installed tollgate package against real servers.

The Go test beside the package (client_test.go's TestPythonClient) starts
them and sets TOLLGATE_BIN (the tollgate binary, for pool commands),
TOLLGATE_SERVER (a standalone server) and TOLLGATE_CLUSTER (the addresses
of two servers of a cluster on etcd).
"""

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import uuid

import grpc

import tollgate
import tollgate.aio

BIN = os.environ.get("TOLLGATE_BIN", "")
SERVER = os.environ.get("TOLLGATE_SERVER", "")
CLUSTER = os.environ.get("TOLLGATE_CLUSTER", "")


def tg(*args, server=SERVER):
    """Runs the tollgate CLI against server and returns its output."""
    return subprocess.run([BIN, "--server", server] + list(args), check=True,
                          capture_output=True, text=True).stdout


def new_pool(*flags, server=SERVER):
    name = "py-" + uuid.uuid4().hex[:8]
    tg("pool", "create", name, *flags, server=server)
    return name


@unittest.skipUnless(BIN and SERVER, "run by the Go test TestPythonClient, which starts the servers")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = tollgate.Client(SERVER)
        self.addCleanup(self.client.close)

    def test_installed_package_is_tested(self):
        self.assertIn(sys.prefix, tollgate.__file__)

    def test_lease_context_manager(self):
        pool = new_pool("--concurrency", "2")
        with self.client.lease(pool, weight=2, ttl=5) as lease:
            self.assertGreater(lease.fencing_token, 0)
            self.assertEqual(lease.weight, 2)
            self.assertFalse(lease.lost.is_set())
            with self.assertRaises(tollgate.TollgateError) as cm:
                with self.client.lease(pool, no_wait=True):
                    pass
            self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(cm.exception.reason, "NO_CAPACITY")
            first = lease.fencing_token
        with self.client.lease(pool) as lease:
            self.assertGreater(lease.fencing_token, first)

    def test_renewals_keep_a_lease_past_its_ttl(self):
        pool = new_pool("--concurrency", "1")
        with self.client.lease(pool, ttl=1.5) as lease:
            time.sleep(3.5)
            lease.check()
            self.assertIn(lease.id.split(".")[0], tg("lease", "list", pool))

    def test_a_revoked_lease_is_lost(self):
        pool = new_pool("--concurrency", "1")
        lease = self.client.lease(pool, ttl=0.9).acquire()
        tg("lease", "revoke", pool, str(lease.fencing_token))
        self.assertTrue(lease.lost.wait(5), "the revocation was not noticed")
        self.assertTrue(lease.lost_reason)
        with self.assertRaises(tollgate.LeaseLost):
            lease.release()

    def test_errors_carry_the_reason(self):
        with self.assertRaises(tollgate.TollgateError) as cm:
            with self.client.lease("py-no-such-pool"):
                pass
        e = cm.exception
        self.assertEqual(e.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(e.reason, "POOL_NOT_FOUND")
        self.assertEqual(e.metadata.get("pool"), "py-no-such-pool")
        self.assertIn("py-no-such-pool", str(e))

    def test_take(self):
        pool = new_pool("--rate", "100", "--burst", "5")
        self.assertEqual(self.client.take(pool, tokens=5).tokens, 5)
        with self.assertRaises(tollgate.TollgateError) as cm:
            self.client.take(pool, tokens=6)
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        taken = self.client.take(pool, tokens=2, max_wait=1)
        self.assertEqual(taken.tokens, 2)

    def test_no_server_answers(self):
        c = tollgate.Client("127.0.0.1:1", timeout=2)
        with self.assertRaises(tollgate.TollgateError) as cm:
            c.take("x")
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("no Tollgate server answered at 127.0.0.1:1", str(cm.exception))
        c.close()

    def test_addresses(self):
        self.assertEqual(tollgate.Client("localhost")._router.addresses, ["localhost:7070"])
        with self.assertRaises(ValueError) as cm:
            tollgate.Client("http://localhost:7070")
        self.assertIn("localhost:7070", str(cm.exception))

    def test_two_processes_share_one_limit(self):
        """Two processes, each holding the pool's only permit around a
        critical section several times (one longer than the TTL of 2 s), never
        overlap, and the fencing tokens grow with the sections' order."""
        pool = new_pool("--concurrency", "1")
        worker = textwrap.dedent("""
            import sys, time, tollgate
            server, pool, hold, record = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
            c = tollgate.Client(server)
            for _ in range(4):
                with c.lease(pool, ttl=2) as lease:
                    start = time.time()
                    time.sleep(hold)
                    lease.check()
                    end = time.time()
                with open(record, "a") as f:
                    f.write("%r %r %d\\n" % (start, end, lease.fencing_token))
        """)
        with tempfile.TemporaryDirectory() as tmp:
            record = os.path.join(tmp, "record")
            procs = [subprocess.Popen([sys.executable, "-c", worker, SERVER, pool, str(hold), record],
                                      stderr=subprocess.PIPE, text=True)
                     for hold in (0.1, 2.5)]
            errs = [p.communicate(timeout=120)[1] for p in procs]
            self.assertEqual([p.returncode for p in procs], [0, 0], errs)
            with open(record) as f:
                sections = sorted((float(s), float(e), int(t)) for s, e, t in (l.split() for l in f))
        self.assertEqual(len(sections), 8)
        for (s1, e1, t1), (s2, e2, t2) in zip(sections, sections[1:]):
            self.assertLessEqual(e1, s2, "critical sections overlapped: %s" % sections)
            self.assertLess(t1, t2, "fencing tokens do not grow: %s" % sections)


@unittest.skipUnless(BIN and CLUSTER, "run by the Go test TestPythonClient, which starts the servers")
class ClusterTest(unittest.TestCase):
    def test_follows_the_leader_hint(self):
        """Given any one server of the cluster (4 shards over 2 servers),
        calls about pools of several shards reach each pool's owner."""
        addrs = CLUSTER.split(",")
        pools = [new_pool("--concurrency", "1", server=CLUSTER) for _ in range(4)]
        for addr in addrs:
            with tollgate.Client(addr) as c:
                for pool in pools:
                    with c.lease(pool) as lease:
                        self.assertGreater(lease.fencing_token, 0)


@unittest.skipUnless(BIN and SERVER, "run by the Go test TestPythonClient, which starts the servers")
class AsyncClientTest(unittest.TestCase):
    def test_lease_take_and_errors(self):
        pool = new_pool("--concurrency", "1", "--rate", "100", "--burst", "10")

        async def main():
            async with tollgate.aio.Client(SERVER) as c:
                async with c.lease(pool, ttl=1.5) as lease:
                    await asyncio.sleep(3.2)  # two TTLs: only the renewals keep it
                    lease.check()
                    with self.assertRaises(tollgate.TollgateError) as cm:
                        await c.lease(pool, no_wait=True).acquire()
                    self.assertEqual(cm.exception.reason, "NO_CAPACITY")
                self.assertEqual((await c.take(pool, tokens=3)).tokens, 3)
                lease = await c.lease(pool, ttl=0.9).acquire()
                tg("lease", "revoke", pool, str(lease.fencing_token))
                await asyncio.wait_for(lease.lost.wait(), 5)
                with self.assertRaises(tollgate.LeaseLost):
                    await lease.release()

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
