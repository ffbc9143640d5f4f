package hatest

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// SessionTTL is the etcd session TTL the cluster's servers run with.
const SessionTTL = 2 * time.Second

// Server is one `tollgate serve` process on a loopback address.
type Server struct {
	*Proc
	Addr     string
	HTTPAddr string // its HTTP listener: the Observer reads its recent events there
	Proxy    *Proxy // its link to etcd; nil for a standalone server
}

func newServer(t testing.TB, bin, addr string, extra ...string) *Server {
	httpAddr := FreeAddr(t)
	args := append([]string{"serve", "--listen", addr, "--http", httpAddr, "--log-level", "debug", "--shutdown-timeout", "1s"}, extra...)
	return &Server{Proc: NewProc(t, "server "+addr, bin, args...), Addr: addr, HTTPAddr: httpAddr}
}

// Start starts a run of the server and waits until it listens.
func (s *Server) Start() {
	s.t.Helper()
	s.Proc.Start()
	s.WaitListening(s.Addr)
}

// Standalone returns a server without etcd, on a loopback address and a
// data directory of its own (kept across runs), not started yet.
func Standalone(t testing.TB, bin string) *Server {
	return newServer(t, bin, FreeAddr(t), "--data-dir", filepath.Join(t.TempDir(), "data"))
}

// Etcd is an etcd member: etcdtest's embedded Etcd or its Process.
type Etcd interface {
	Endpoint() string
	Stop()
	Restart()
}

// Cluster is several servers on one etcd, each through its own Proxy so
// that one server's link can be cut.
type Cluster struct {
	t       testing.TB
	Etcd    Etcd
	Servers []*Server
	conns   map[string]*grpc.ClientConn
	bin     string   // the program of the servers StartCluster started
	extra   []string // and their extra flags
}

// StartCluster starts n servers on etcd, with SessionTTL and the extra
// serve flags (such as --shards 16).
func StartCluster(t testing.TB, bin string, etcd Etcd, n int, extra ...string) *Cluster {
	t.Helper()
	// Every proxy listens before any server's address is picked: a proxy
	// listening on :0 could otherwise be given a port FreeAddr had just
	// picked for a server (and forward that server's clients to etcd).
	var proxies []*Proxy
	for range n {
		proxies = append(proxies, StartProxy(t, strings.TrimPrefix(etcd.Endpoint(), "http://")))
	}
	var servers []*Server
	taken := map[string]bool{}
	for _, px := range proxies {
		addr := FreeAddr(t)
		for taken[addr] { // a port just freed may be picked again
			addr = FreeAddr(t)
		}
		taken[addr] = true
		servers = append(servers, clusterServer(t, bin, addr, px, extra))
	}
	for _, s := range servers {
		s.Start()
	}
	c := NewCluster(t, etcd, servers...)
	c.bin, c.extra = bin, extra
	return c
}

// clusterServer returns a server of a cluster on addr, reaching etcd
// through px, not started yet.
func clusterServer(t testing.TB, bin, addr string, px *Proxy, extra []string) *Server {
	args := append([]string{"--etcd", px.URL(), "--advertise", addr, "--etcd-session-ttl", SessionTTL.String()}, extra...)
	s := newServer(t, bin, addr, args...)
	s.Proxy = px
	return s
}

// AddServer starts one more server of a cluster StartCluster started, with
// the same flags, and returns it.
func (c *Cluster) AddServer() *Server {
	c.t.Helper()
	px := StartProxy(c.t, strings.TrimPrefix(c.Etcd.Endpoint(), "http://"))
	s := clusterServer(c.t, c.bin, FreeAddr(c.t), px, c.extra)
	s.Start()
	c.Servers = append(c.Servers, s)
	return s
}

// NewCluster returns a Cluster of servers already made (etcd may be nil:
// for standalone servers, each of which leads).
func NewCluster(t testing.TB, etcd Etcd, servers ...*Server) *Cluster {
	c := &Cluster{t: t, Etcd: etcd, Servers: servers, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			cc.Close()
		}
	})
	return c
}

// Addrs returns the servers' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr
	}
	return out
}

// CheckLogs checks every server's logs (see Proc.CheckLogs).
func (c *Cluster) CheckLogs() {
	for _, s := range c.Servers {
		s.CheckLogs()
	}
}

// WaitLeader waits up to timeout for a running server other than those in
// not to say that it is the leader (GetCluster answered by the leader
// itself; a standalone server always leads), and returns it and its
// epoch.
func (c *Cluster) WaitLeader(timeout time.Duration, not ...*Server) (*Server, int64) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		for _, s := range c.Servers {
			if !s.Running() || contains(not, s) {
				continue
			}
			resp, err := c.cluster(s)
			switch {
			case err != nil:
				last = s.Addr + ": " + err.Error()
			case resp.GetStandalone() || resp.GetSelf() == resp.GetLeader() && resp.GetLeader() == s.Addr:
				return s, resp.GetEpoch()
			default:
				last = s.Addr + " says the leader is " + resp.GetLeader()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("hatest: no new leader within %v (last: %s)", timeout, last)
	return nil, 0
}

// cluster asks s for GetCluster.
func (c *Cluster) cluster(s *Server) (*tollgatev1.GetClusterResponse, error) {
	cc, ok := c.conns[s.Addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return nil, err
		}
		c.conns[s.Addr] = cc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return tollgatev1.NewAdminServiceClient(cc).GetCluster(ctx, &tollgatev1.GetClusterRequest{})
}

func contains(list []*Server, s *Server) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Worker is a worker process (the worker package) running a Workload.
type Worker struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when its records are all read
	recs  []Record
	err   error
	log   string
}

// StartWorker starts bin (the worker program) with wl.
func StartWorker(t testing.TB, bin string, wl Workload) *Worker {
	t.Helper()
	js, err := json.Marshal(wl)
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{t: t, name: wl.Worker, done: make(chan struct{}), log: filepath.Join(t.TempDir(), "worker.log")}
	logf, err := os.Create(w.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	w.cmd = exec.Command(bin)
	w.cmd.Env = append(os.Environ(), WorkloadEnv+"="+string(js), "GORACE=halt_on_error=1")
	w.cmd.Stderr = logf
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("hatest: starting worker %s: %v", wl.Worker, err)
	}
	go func() {
		w.recs, w.err = ReadRecords(stdout)
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
		_ = w.cmd.Wait()
	})
	return w
}

// Stop tells the worker to finish (its holds end and are reported) and
// returns everything it reported.
func (w *Worker) Stop() []Record {
	w.t.Helper()
	w.stdin.Close()
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
		w.t.Errorf("hatest: worker %s did not finish within 20s of its stop", w.name)
	}
	err := w.cmd.Wait()
	log, _ := os.ReadFile(w.log)
	if err != nil || w.err != nil {
		w.t.Errorf("hatest: worker %s: %v, %v\n%s", w.name, err, w.err, log)
	}
	if strings.Contains(string(log), "WARNING: DATA RACE") || strings.Contains(string(log), "panic:") {
		w.t.Errorf("hatest: worker %s logged a race or a panic:\n%s", w.name, log)
	}
	return w.recs
}
