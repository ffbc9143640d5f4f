package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// startRun runs "tollgate run args..." in the background; it returns the
// command's stdout, stderr and a channel of its exit status.
func startRun(t *testing.T, addr string, args ...string) (stdout, stderr *cliBuffer, done <-chan int) {
	t.Helper()
	stdout, stderr = &cliBuffer{}, &cliBuffer{}
	ch := make(chan int, 1)
	go func() {
		ch <- run(context.Background(), append([]string{"--server", addr, "run"}, args...), stdout, stderr, func(string) string { return "" })
	}()
	return stdout, stderr, ch
}

// waitExit waits for a background command's exit status.
func waitExit(t *testing.T, done <-chan int, stderr *cliBuffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(cliWaitLimit):
		t.Fatalf("the command did not exit; stderr:\n%s", stderr.String())
		return 0
	}
}

func TestRunPassesExitStatusAndLease(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	r := runCLI(t, ts.addr, "run", "db", "--ttl", "1m", "--", "sh", "-c",
		`echo "pool=$TOLLGATE_POOL token=$TOLLGATE_FENCING_TOKEN weight=$TOLLGATE_WEIGHT id=$TOLLGATE_LEASE_ID resources=${TOLLGATE_RESOURCES-unset}"; exit 7`)
	if r.code != 7 {
		t.Fatalf("exit status %d, want the command's 7\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "pool=db token=1 weight=1 id=1.") || !strings.HasSuffix(r.stdout, " resources=unset\n") || r.stderr != "" {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if st := ts.info(t, "db").Status; st.Held != 0 || st.Released != 1 {
		t.Fatalf("after the command: held %d, released %d", st.Held, st.Released)
	}
	runCLI(t, ts.addr, "run", "db", "--", "true").mustSucceed(t)
	if r := runCLI(t, ts.addr, "run", "db", "--", "sh", "-c", "kill -KILL $$"); r.code != 128+9 {
		t.Fatalf("a command killed by SIGKILL: exit status %d, want 137", r.code)
	}
	runCLI(t, ts.addr, "run", "db", "--", "no-such-command-here").mustFail(t, 127, "cannot run the command")
	runCLI(t, ts.addr, "run", "db", "true").mustFail(t, 2, "give the command after --")
	runCLI(t, ts.addr, "run", "--", "true").mustFail(t, 2, "missing POOL")
	runCLI(t, ts.addr, "run", "db", "--grace", "0s", "--", "true").mustFail(t, 2, "--grace must be positive")
	if st := ts.info(t, "db").Status; st.Held != 0 || st.Released != 4 {
		t.Fatalf("after the commands: held %d, released %d", st.Held, st.Released)
	}
}

// Each of tollgate run's own outcomes has an exit status of its own, apart
// from the command's; the busy one can be chosen.
func TestRunExitStatuses(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	if _, err := ts.srv.Engine().Acquire(context.Background(), limiter.AcquireRequest{Pool: "db", Weight: 1, TTL: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	runCLI(t, ts.addr, "run", "db", "--try", "--", "true").mustFail(t, 241, "NO_CAPACITY")
	runCLI(t, ts.addr, "run", "db", "--try", "--conflict-exit-code", "7", "--", "true").mustFail(t, 7, "NO_CAPACITY")
	if r := runCLI(t, ts.addr, "run", "db", "--try", "-E", "0", "--", "true"); r.code != 0 || !strings.Contains(r.stderr, "NO_CAPACITY") {
		t.Fatalf("-E 0: exit status %d, stderr:\n%s", r.code, r.stderr)
	}
	runCLI(t, ts.addr, "run", "db", "-E", "256", "--", "true").mustFail(t, 2, "--conflict-exit-code must be 0 to 255")

	_, stderr, done := startRun(t, ts.addr, "db", "--wait", "1m", "--", "true")
	deadline := time.Now().Add(cliWaitLimit)
	for ts.info(t, "db").Status.Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the run never waited; stderr:\n%s", stderr.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	ts.clock.Advance(time.Minute)
	code := waitExit(t, done, stderr)
	cliResult{"", stderr.String(), code}.mustFail(t, 241, "WAIT_TIMEOUT")

	runCLI(t, ts.addr, "run", "nope", "--", "true").mustFail(t, 242, "(NOT_FOUND POOL_NOT_FOUND)")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()
	runCLI(t, down, "run", "db", "--timeout", "5s", "--", "true").mustFail(t, 243, "no server answered there")
	runCLI(t, ts.addr, "run", "db", "--weight", "2", "--", "true").mustFail(t, 244, "INVALID_ARGUMENT")
}

func TestRunGivesTheInstances(t *testing.T) {
	ts := newCLIServer(t)
	runCLI(t, ts.addr, "pool", "create", "db", "--kind", "active", "--resources", "conn-1,conn-2", "--attr", "addr=db-{id}:5432").mustSucceed(t)
	r := runCLI(t, ts.addr, "run", "db", "--weight", "2", "--", "sh", "-c", `echo "$TOLLGATE_RESOURCES"; echo "$TOLLGATE_RESOURCES_JSON"`).mustSucceed(t)
	lines := strings.Split(r.stdout, "\n")
	var rs []resourceJSON
	if err := json.Unmarshal([]byte(lines[1]), &rs); err != nil || len(rs) != 2 || rs[0].ID == rs[1].ID || lines[0] != rs[0].ID+","+rs[1].ID {
		t.Fatalf("stdout:\n%s (%v)", r.stdout, err)
	}
	for _, r := range rs {
		if (r.ID != "conn-1" && r.ID != "conn-2") || r.Attributes["addr"] != "db-"+r.ID+":5432" {
			t.Fatalf("instance %+v", r)
		}
	}
}

// Two runs on a pool of one: the second waits in the queue until the
// first's command exits.
func TestRunHoldsTheLimit(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	gate := filepath.Join(t.TempDir(), "gate")
	out1, err1, done1 := startRun(t, ts.addr, "db", "--", "sh", "-c", `echo first; while [ ! -e "$1" ]; do sleep 0.01; done; echo first done`, "sh", gate)
	waitOutput(t, out1, done1, "first\n")
	out2, err2, done2 := startRun(t, ts.addr, "db", "--", "echo", "second")
	deadline := time.Now().Add(cliWaitLimit)
	for ts.info(t, "db").Status.Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second run never waited; stderr:\n%s", err2.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if out2.String() != "" {
		t.Fatalf("the second command ran while the first held the pool: %q", out2.String())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, done1, err1); code != 0 {
		t.Fatalf("first run exited %d", code)
	}
	if code := waitExit(t, done2, err2); code != 0 || out2.String() != "second\n" {
		t.Fatalf("second run exited %d with %q", code, out2.String())
	}
	if st := ts.info(t, "db").Status; st.Held != 0 || st.Released != 2 {
		t.Fatalf("after both: held %d, released %d", st.Held, st.Released)
	}
}

// A revoked lease: the command gets SIGTERM, and tollgate exits 1 saying
// why; a command that ignores SIGTERM gets SIGKILL after --grace.
func TestRunLeaseLost(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})

	out, stderr, done := startRun(t, ts.addr, "db", "--", "sh", "-c", `trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.01; done`)
	waitOutput(t, out, done, "ready\n")
	if err := ts.srv.Engine().RevokeLease("db", 1, "maintenance"); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, done, stderr)
	r := cliResult{out.String(), stderr.String(), code}
	r.mustFail(t, 246, "lease lost", "LEASE_REVOKED", "sending the command SIGTERM (SIGKILL in 10s)", "ran without its lease", "exited with status 3")
	if !strings.Contains(r.stdout, "got TERM") {
		t.Fatalf("the command was not sent SIGTERM:\n%s", r.stdout)
	}

	out, stderr, done = startRun(t, ts.addr, "db", "--grace", "100ms", "--", "sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.01; done`)
	waitOutput(t, out, done, "ready\n")
	if err := ts.srv.Engine().RevokeLease("db", 2, "maintenance"); err != nil {
		t.Fatal(err)
	}
	code = waitExit(t, done, stderr)
	cliResult{out.String(), stderr.String(), code}.mustFail(t, 246, "sending SIGKILL", "exited with status 137")
}

// SIGINT and SIGTERM sent to tollgate run (the real binary) reach the
// command, whose exit status tollgate passes on after releasing the lease.
func TestRunForwardsSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	bin := buildTollgate(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		var out, errOut cliBuffer
		cmd := exec.Command(bin, "run", "db", "--server", ts.addr, "--", "sh", "-c", `trap 'echo got INT; exit 4' INT; trap 'echo got TERM; exit 5' TERM; echo ready; while :; do sleep 0.01; done`)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() {
			_ = cmd.Wait()
			done <- cmd.ProcessState.ExitCode()
		}()
		waitOutput(t, &out, done, "ready\n")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := waitExit(t, done, &errOut)
		want, wantOut := 4, "got INT"
		if sig == syscall.SIGTERM {
			want, wantOut = 5, "got TERM"
		}
		if code != want || !strings.Contains(out.String(), wantOut) {
			t.Fatalf("%v: exit status %d (want %d)\nstdout:\n%s\nstderr:\n%s", sig, code, want, out.String(), errOut.String())
		}
	}
	if st := ts.info(t, "db").Status; st.Held != 0 || st.Released != 2 {
		t.Fatalf("after both: held %d, released %d", st.Held, st.Released)
	}
}

// --wait is the deprecated name of --wait-timeout: it still works, and
// says so.
func TestRunDeprecatedWait(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	r := runCLI(t, ts.addr, "run", "db", "--wait", "1s", "--", "true").mustSucceed(t)
	if !strings.Contains(r.stderr, "--wait is deprecated; use --wait-timeout") || r.stdout != "" {
		t.Fatalf("no deprecation notice:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
}
