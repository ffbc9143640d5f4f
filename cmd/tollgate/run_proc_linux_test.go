package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// startRunBinary runs the tollgate binary bin as "tollgate run args..."
// against addr, in a process group of its own as a shell runs a job.
func startRunBinary(t *testing.T, bin, addr string, args ...string) (cmd *exec.Cmd, stdout, stderr *cliBuffer, done <-chan int) {
	t.Helper()
	stdout, stderr = &cliBuffer{}, &cliBuffer{}
	cmd = exec.Command(bin, append([]string{"run", "--server", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second // a command left running does not hold the test
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		ch <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, stdout, stderr, ch
}

// pids reads the "name PID" pairs a command printed.
func pids(t *testing.T, out string, names ...string) []int {
	t.Helper()
	var ps []int
	for _, name := range names {
		var pid int
		i := strings.Index(out, name+" ")
		if i < 0 {
			t.Fatalf("no %q in output:\n%s", name, out)
		}
		if _, err := fmt.Sscan(out[i+len(name)+1:], &pid); err != nil {
			t.Fatalf("%s: %v in output:\n%s", name, err, out)
		}
		ps = append(ps, pid)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	return ps
}

// gone reports whether process pid has ended (a zombie has).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z") || strings.HasPrefix(s[i+1:], " X")
}

// waitGone waits until each of pids has ended.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(cliWaitLimit)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: process %d is still running", what, pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// However tollgate run dies, its command's whole process group dies with
// it: a grandchild too.
func TestRunCommandDiesWithTollgate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2}) // a killed run's lease stays: the clock is fake
	bin := buildTollgate(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGHUP} {
		cmd, out, errOut, done := startRunBinary(t, bin, ts.addr, "db", "--", "sh", "-c", `sleep 300 & echo "child $$ grandchild $!"; wait; true`)
		waitOutput(t, out, done, "grandchild")
		ps := pids(t, out.String(), "child", "grandchild")
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := waitExit(t, done, errOut)
		waitGone(t, fmt.Sprintf("after %v of tollgate run (exit status %d)", sig, code), ps...)
	}
}

// A lost lease ends the command's whole group: SIGTERM to every process in
// it, then SIGKILL after --grace.
func TestRunLeaseLostEndsTheGroup(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})

	out, stderr, done := startRun(t, ts.addr, "db", "--", "sh", "-c",
		`(trap 'echo grandchild got TERM; exit 0' TERM; echo grandchild ready; while :; do sleep 0.05; done) &
		trap 'echo got TERM; wait; exit 3' TERM; echo parent ready; wait`)
	// Each waits for its own line: "ready" alone would match the
	// grandchild's, printed before the parent has set its trap.
	waitOutput(t, out, done, "parent ready\n")
	waitOutput(t, out, done, "grandchild ready\n")
	if err := ts.srv.Engine().RevokeLease("db", 1, "maintenance"); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, done, stderr)
	r := cliResult{out.String(), stderr.String(), code}
	r.mustFail(t, 246, "lease lost", "exited with status 3")
	if !strings.Contains(r.stdout, "grandchild got TERM") || !strings.Contains(r.stdout, "\ngot TERM") {
		t.Fatalf("the group was not sent SIGTERM:\n%s", r.stdout)
	}

	out, stderr, done = startRun(t, ts.addr, "db", "--grace", "100ms", "--", "sh", "-c",
		`trap '' TERM; sleep 300 & echo "child $$ grandchild $!"; wait; true`)
	waitOutput(t, out, done, "grandchild")
	ps := pids(t, out.String(), "child", "grandchild")
	if err := ts.srv.Engine().RevokeLease("db", 2, "maintenance"); err != nil {
		t.Fatal(err)
	}
	code = waitExit(t, done, stderr)
	cliResult{out.String(), stderr.String(), code}.mustFail(t, 246, "sending SIGKILL", "exited with status 137")
	waitGone(t, "after SIGKILL", ps...)
}

// A signal sent to tollgate run's whole job, as a terminal's Ctrl-C is,
// reaches the command once: the command is not in that job, and tollgate
// passes the signal on.
func TestRunSignalsTheCommandOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	bin := buildTollgate(t)
	cmd, out, errOut, done := startRunBinary(t, bin, ts.addr, "db", "--", "sh", "-c",
		`n=0; trap 'n=$((n+1)); echo "INT $n"' INT; trap 'echo "TERM after $n INT"; exit 0' TERM; echo "child $$"; while :; do sleep 1 & wait $!; done`)
	waitOutput(t, out, done, "child ")
	child := pids(t, out.String(), "child")[0]
	if pg := pgrp(t, child); pg == cmd.Process.Pid {
		t.Fatalf("the command is in tollgate run's process group %d: a terminal signals it directly", pg)
	}
	// With tollgate stopped, a signal that reached the command directly
	// would be handled before the one tollgate passes on.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, done, "INT 1\n")
	// tollgate passes signals on in the order it gets them: TERM comes
	// after any second INT.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, done, errOut); code != 0 || !strings.Contains(out.String(), "TERM after 1 INT\n") {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// pgrp is process pid's process group.
func pgrp(t *testing.T, pid int) int {
	t.Helper()
	pg, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	return pg
}

// A signal that ends the wait for a lease has an exit status of its own.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary")
	}
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	bin := buildTollgate(t)
	_, out1, _, done1 := startRunBinary(t, bin, ts.addr, "db", "--", "sh", "-c", "echo first; exec sleep 300")
	waitOutput(t, out1, done1, "first\n")
	cmd, out, errOut, done := startRunBinary(t, bin, ts.addr, "db", "--", "echo", "second")
	deadline := time.Now().Add(cliWaitLimit)
	for ts.info(t, "db").Status.Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the second run never waited; stderr:\n%s", errOut.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, done, errOut)
	cliResult{out.String(), errOut.String(), code}.mustFail(t, 245, "gave up waiting")
}
