package etcdtest

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/internal/hatest"
)

// Process is an etcd member run from the etcd binary on PATH (Debian's
// etcd-server package), as a process of its own, with short ticks, on
// loopback ports of its own and data in a temporary directory.
type Process struct {
	t      testing.TB
	proc   *hatest.Proc
	client string // http://127.0.0.1:port
}

// StartProcess starts an etcd process for t and stops it when t ends. It
// skips t when there is no etcd binary on PATH, or fails it when the CI
// environment variable is set.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		citest.SkipOrFail(t, "no etcd binary on PATH (Debian: apt-get install etcd-server)")
	}
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	p := &Process{t: t, client: client, proc: hatest.NewProc(t, "etcd", bin,
		"--name", "tollgate-test", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "tollgate-test="+peer,
		"--heartbeat-interval", "10", "--election-timeout", "50",
		"--logger", "zap", "--log-level", "error")}
	p.Restart()
	return p
}

// Endpoint is the member's client URL.
func (p *Process) Endpoint() string { return p.client }

// Stop stops the member with SIGTERM and waits for it to exit; its data
// stays for Restart. Stopping a stopped member does nothing.
func (p *Process) Stop() { p.proc.Terminate(10 * time.Second) }

// Kill stops the member with SIGKILL and waits for it to exit; its data
// stays for Restart.
func (p *Process) Kill() { p.proc.Kill() }

// Restart starts the member again on the same ports and data (Start does
// the first start) and waits until it answers its health check.
func (p *Process) Restart() {
	p.t.Helper()
	p.proc.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !p.healthy(ctx) {
		select {
		case <-p.proc.Exited():
			p.t.Fatalf("etcdtest: etcd exited before it was healthy:\n%s", p.proc.LastLog())
		case <-ctx.Done():
			p.t.Fatal("etcdtest: etcd was not healthy within 30s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// healthy reports whether the member answers /health with health true.
func (p *Process) healthy(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.client+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
}
