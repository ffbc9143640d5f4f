"""Test the Python example against a real Tollgate server.

    python3 examples/python/run_test.py [--tollgate PATH]

It builds the tollgate binary
from the tree (unless --tollgate names one), starts `tollgate serve` on a
free 127.0.0.1 port with a temporary data directory, creates a pool with a
concurrency limit of 1, and runs two example.py processes at once, each
holding a lease around a critical section several times (one round longer
than the lease's TTL, so only the keep-alive keeps it). It then checks
that no two critical sections overlapped and that the fencing tokens grow
with the order of the sections. The example imports the tollgate package
from clients/python (PYTHONPATH), with its committed generated modules.
Exit status 0 means it passed.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
POOL = "py-orders"
LIMIT = 1
ROUNDS = 4
HOLD = 0.15
LONG_HOLD = 1.2  # above TTL: only the renewals keep the lease
TTL = 0.5


def start_server(tollgate, data_dir):
    proc = subprocess.Popen([tollgate, "serve", "--listen", "127.0.0.1:0", "--http", "",
                             "--data-dir", data_dir],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.match(r"tollgate: serving on (\S+)", line)
        if m:
            # Keep reading stderr so the server never blocks on a full pipe.
            subprocess.Popen(["cat"], stdin=proc.stderr, stdout=subprocess.DEVNULL)
            return proc, m.group(1)
    proc.wait()
    raise SystemExit("tollgate serve exited before serving (status %s)" % proc.returncode)


def check(records):
    """The critical sections never overlapped beyond LIMIT, and the fencing
    tokens grow with their order."""
    events = sorted([(s, 1) for s, _, _ in records] + [(e, -1) for _, e, _ in records],
                    key=lambda ev: (ev[0], ev[1]))
    inside = 0
    for t, d in events:
        inside += d
        if inside > LIMIT:
            raise SystemExit("FAIL: %d critical sections at once at %.6f (limit %d): %s"
                             % (inside, t, LIMIT, sorted(records)))
    tokens = [tok for _, _, tok in sorted(records)]
    if tokens != sorted(tokens) or len(set(tokens)) != len(tokens):
        raise SystemExit("FAIL: fencing tokens do not grow with the sections' order: %s" % tokens)


START = time.monotonic()


def step(what):
    """Say how long into the run a step starts: where a slow run spent it."""
    print("%6.1fs %s" % (time.monotonic() - START, what), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tollgate", help="tollgate binary (default: go build ./cmd/tollgate)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="tollgate-py-") as tmp:
        tollgate = args.tollgate
        if not tollgate:
            tollgate = os.path.join(tmp, "tollgate")
            step("building tollgate")
            subprocess.run(["go", "build", "-o", tollgate, "./cmd/tollgate"], cwd=ROOT, check=True)

        step("starting tollgate serve")
        server, addr = start_server(tollgate, os.path.join(tmp, "data"))
        try:
            subprocess.run([tollgate, "--server", addr, "pool", "create", POOL,
                            "--concurrency", str(LIMIT)], check=True, stdout=subprocess.DEVNULL)
            step("running example.py twice at once")
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"))
            record = os.path.join(tmp, "intervals")
            runs = [subprocess.Popen([sys.executable, os.path.join(HERE, "example.py"),
                                      "--server", addr, "--pool", POOL, "--rounds", str(ROUNDS),
                                      "--hold", str(hold), "--ttl", str(TTL),
                                      "--client-id", "py-%d" % i, "--record", record], env=env)
                    for i, hold in enumerate([HOLD, LONG_HOLD])]
            for r in runs:
                if r.wait(timeout=120) != 0:
                    raise SystemExit("FAIL: example.py exited with status %d" % r.returncode)
        finally:
            server.terminate()
            server.wait(timeout=30)

        step("checking the critical sections")
        with open(record) as f:
            records = [(float(s), float(e), int(tok)) for s, e, tok in (line.split() for line in f)]
        if len(records) != 2 * ROUNDS:
            raise SystemExit("FAIL: %d critical sections recorded; want %d" % (len(records), 2 * ROUNDS))
        check(records)
        print("ok: %d critical sections of 2 processes, at most %d at once, fencing tokens %s"
              % (len(records), LIMIT, [tok for _, _, tok in sorted(records)]))


if __name__ == "__main__":
    main()
