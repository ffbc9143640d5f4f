package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
)

// Process is an etcd member run from the etcd binary on PATH (Debian's
// etcd-server package), as a process of its own, with short ticks, on
// loopback ports of its own and data in a temporary directory.
type Process struct {
	t      testing.TB
	bin    string
	dir    string
	client string // http://127.0.0.1:port
	peer   string
	runs   int
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
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
	p := &Process{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "etcd"), client: "http://" + freeAddr(t), peer: "http://" + freeAddr(t)}
	p.Restart()
	t.Cleanup(p.Kill)
	return p
}

// Endpoint is the member's client URL.
func (p *Process) Endpoint() string { return p.client }

// Stop stops the member with SIGTERM and waits for it to exit; its data
// stays for Restart. Stopping a stopped member does nothing.
func (p *Process) Stop() { p.signal(os.Interrupt) }

// Kill stops the member with SIGKILL and waits for it to exit; its data
// stays for Restart.
func (p *Process) Kill() { p.signal(os.Kill) }

func (p *Process) signal(sig os.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// Restart starts the member again on the same ports and data (Start does
// the first start) and waits until it answers its health check.
func (p *Process) Restart() {
	p.t.Helper()
	p.runs++
	logPath := filepath.Join(filepath.Dir(p.dir), fmt.Sprintf("etcd-%d.log", p.runs))
	logf, err := os.Create(logPath)
	if err != nil {
		p.t.Fatalf("etcdtest: %v", err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin,
		"--name", "tollgate-test", "--data-dir", p.dir,
		"--listen-client-urls", p.client, "--advertise-client-urls", p.client,
		"--listen-peer-urls", p.peer, "--initial-advertise-peer-urls", p.peer,
		"--initial-cluster", "tollgate-test="+p.peer,
		"--heartbeat-interval", "10", "--election-timeout", "50",
		"--logger", "zap", "--log-level", "error")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("etcdtest: starting %s: %v", p.bin, err)
	}
	cmd, exited := p.cmd, make(chan struct{})
	p.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !p.healthy(ctx) {
		select {
		case <-exited:
			p.cmd = nil
			b, _ := os.ReadFile(logPath)
			p.t.Fatalf("etcdtest: etcd exited before it was healthy:\n%s", b)
		case <-ctx.Done():
			p.Kill()
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
