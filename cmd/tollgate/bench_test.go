package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/citest"
)

// TestBench runs tollgate bench for a moment against a server it starts
// (and a redis-server, where there is one) and checks that every case
// made pairs; it measures nothing.
func TestBench(t *testing.T) {
	bin := buildTollgate(t)
	bench := func(t *testing.T, extra ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args := append([]string{"bench", "--tollgate-bin", bin, "--duration", "100ms", "--rounds", "2", "--callers", "1,3"}, extra...)
		if code := run(context.Background(), args, &stdout, &stderr, func(string) string { return "" }); code != 0 {
			t.Fatalf("tollgate %v: exit status %d\nstdout:\n%s\nstderr:\n%s", args, code, &stdout, &stderr)
		}
		return stdout.String()
	}
	cases := []string{caseStream, caseStreamAsync, caseUnary, caseNoop}
	t.Run("tollgate", func(t *testing.T) {
		checkBenchTable(t, bench(t), cases)
	})
	t.Run("redis", func(t *testing.T) {
		if _, err := exec.LookPath("redis-server"); err != nil {
			citest.SkipOrFail(t, "redis-server is not installed, so tollgate bench --peer redis is not tested here (apt-get install redis-server; .ci/run installs it)")
		}
		out := bench(t, "--peer", "redis")
		checkBenchTable(t, out, append(cases, caseRedis))
		if !strings.Contains(out, "Tollgate stream ÷ Redis") {
			t.Errorf("no ratio to Redis in:\n%s", out)
		}
	})
	t.Run("pools", func(t *testing.T) {
		out := bench(t, "--pools", "1,3")
		for _, c := range []string{caseStream, caseUnary} {
			for _, callers := range []string{"1", "3"} {
				for _, n := range []string{"1", "3"} {
					row := "| " + callers + " | " + c + ", " + n + " pools | "
					i := strings.Index(out, row)
					if i < 0 {
						t.Fatalf("no row %q in:\n%s", row, out)
					}
					pairs, _, _ := strings.Cut(out[i+len(row):], " |")
					if p, err := strconv.ParseInt(strings.ReplaceAll(pairs, ",", ""), 10, 64); err != nil || p <= 0 {
						t.Errorf("row %q: %q pairs/s", row, pairs)
					}
				}
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"bench", "--peer", "etcd"}, &stdout, &stderr, func(string) string { return "" }); code != exitUsage {
			t.Fatalf("--peer etcd: exit status %d, want %d; stderr: %s", code, exitUsage, &stderr)
		}
		if !strings.Contains(stderr.String(), `the peer is "redis"`) {
			t.Errorf("--peer etcd: stderr %q does not say which peer is known", &stderr)
		}
	})
}

// checkBenchTable checks that the table has a row with pairs for each case
// at 1 and 3 callers.
func checkBenchTable(t *testing.T, out string, cases []string) {
	t.Helper()
	rows := make(map[string]int64)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 8 {
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(f[3]), ",", ""), 10, 64)
		if err != nil {
			continue
		}
		rows[strings.TrimSpace(f[1])+" "+strings.TrimSpace(f[2])] = n
	}
	for _, callers := range []string{"1", "3"} {
		for _, c := range cases {
			if rows[callers+" "+c] <= 0 {
				t.Errorf("no pairs for %q at %s callers in:\n%s", c, callers, out)
			}
		}
	}
}
