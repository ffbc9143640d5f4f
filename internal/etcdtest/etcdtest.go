// Package etcdtest runs an etcd server for tests: embedded in the test's
// process (go.etcd.io/etcd/server/v3/embed), with short ticks, on loopback
// ports of its own and data in a temporary directory. It is imported only
// by tests.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is one embedded etcd member.
type Etcd struct {
	t      testing.TB
	dir    string
	client string // http://127.0.0.1:port
	peer   string
	srv    *embed.Etcd
}

// Start starts an etcd member for t and stops it when t ends.
func Start(t testing.TB) *Etcd {
	t.Helper()
	e := &Etcd{t: t, dir: t.TempDir(), client: "http://" + freeAddr(t), peer: "http://" + freeAddr(t)}
	e.Restart()
	t.Cleanup(e.Stop)
	return e
}

// Endpoint is the member's client URL.
func (e *Etcd) Endpoint() string { return e.client }

// Stop stops the member; its data stays for Restart. Stopping a stopped
// member does nothing.
func (e *Etcd) Stop() {
	if e.srv == nil {
		return
	}
	e.srv.Close()
	<-e.srv.Server.StopNotify()
	e.srv = nil
}

// Restart starts the member again on the same ports and data (Start does
// the first start).
func (e *Etcd) Restart() {
	e.t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = e.dir
	cfg.Name = "tollgate-test"
	cu, pu := mustURL(e.t, e.client), mustURL(e.t, e.peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, e.peer)
	cfg.TickMs, cfg.ElectionMs = 10, 50
	cfg.LogLevel = "panic" // its errors at shutdown are expected here
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		e.t.Fatalf("etcdtest: starting etcd: %v", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		srv.Close()
		e.t.Fatal("etcdtest: etcd did not become ready in 30s")
	}
	e.srv = srv
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func mustURL(t testing.TB, s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return *u
}
