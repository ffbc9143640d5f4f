"""Hold a Tollgate lease around a critical section, a few times, with the
tollgate package (clients/python in this repository).

    PYTHONPATH=clients/python python3 examples/python/example.py --server 127.0.0.1:7070 --pool orders-db --rounds 3

Each round acquires a lease, works for --hold seconds while the package
renews the lease in the background, and releases it. With --record FILE,
each round appends one line "start end fencing_token" (CLOCK_MONOTONIC
seconds, shared by every process on the machine) so that several runs can
be checked for overlap.
"""

import argparse
import os
import sys
import time

import tollgate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.environ.get("TOLLGATE_SERVER", "127.0.0.1:7070"),
                    help="Tollgate server address (host:port, or several, comma-separated); env TOLLGATE_SERVER")
    ap.add_argument("--pool", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--hold", type=float, default=0.5, help="seconds of work per round")
    ap.add_argument("--ttl", type=float, default=5.0, help="lease TTL in seconds")
    ap.add_argument("--client-id", default="python-%d" % os.getpid())
    ap.add_argument("--record", help="append each round's interval to this file")
    args = ap.parse_args()

    with tollgate.Client(args.server, client_id=args.client_id) as client:
        for _ in range(args.rounds):
            try:
                with client.lease(args.pool, ttl=args.ttl) as lease:
                    start = time.monotonic()
                    print("acquired lease %s fencing_token=%d" % (lease.id, lease.fencing_token), flush=True)
                    lease.lost.wait(args.hold)  # the critical section, cut short if the lease is lost
                    lease.check()
                    end = time.monotonic()
                print("released lease %s" % lease.id, flush=True)
            except tollgate.LeaseLost as e:
                print("lost: %s" % e, file=sys.stderr)
                return 1
            except tollgate.TollgateError as e:
                print("error code=%s reason=%s message=%r" % (e.code.name, e.reason, e.message), file=sys.stderr)
                return 1
            if args.record:
                with open(args.record, "a") as f:
                    f.write("%.6f %.6f %d\n" % (start, end, lease.fencing_token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
