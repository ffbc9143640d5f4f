package main

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server/tlstest"
)

// A command that cannot reach a server says what was wrong and what to
// type instead.
func TestConnectionErrorsSayWhatToDo(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	f := ca.WriteFiles(t, dir, "server")
	other := tlstest.NewCA(t, "other CA").WriteFiles(t, t.TempDir(), "x")
	tlsAddr, tlsHTTP := startServe(t, "--tls-cert", f.Cert, "--tls-key", f.Key)
	mtlsAddr, _ := startServe(t, "--tls-cert", f.Cert, "--tls-key", f.Key, "--client-ca", f.CA)
	addr, httpAddr := startServe(t)
	down := freeAddr(t)

	runCLI(t, httpAddr, "pool", "list").mustFail(t, 1, "looks like Tollgate's HTTP port", "use the gRPC port", "7070")
	runCLI(t, tlsAddr, "pool", "list").mustFail(t, 1, "if it uses TLS, give --tls-ca")
	runCLI(t, tlsHTTP, "pool", "list").mustFail(t, 1, "if it uses TLS, give --tls-ca", "HTTP port")
	runCLI(t, addr, "--tls-ca", f.CA, "pool", "list").mustFail(t, 1, "does not use TLS: drop --tls-ca")
	runCLI(t, tlsAddr, "--tls-ca", other.CA, "pool", "list").mustFail(t, 1, "give --tls-ca with the CA that signed it")
	// TLS 1.3 lets the refusal of a missing client certificate come as
	// the alert or as a broken connection: either way the hint names the
	// flags.
	runCLI(t, mtlsAddr, "--tls-ca", f.CA, "pool", "list").mustFail(t, 1, "client certificate", "give --tls-cert and --tls-key")
	runCLI(t, down, "pool", "list").mustFail(t, 1, "no server answered at "+down, "connection refused")
	runCLI(t, "http://"+addr, "pool", "list").mustFail(t, 1, "give host:port without http:// ("+addr+")")

	// Every server of a list down: at once, naming each, not after
	// --timeout.
	down2 := freeAddr(t)
	runCLI(t, down+","+down2, "--timeout", "1m", "pool", "list").mustFail(t, 1, "no server of the list answered", down, down2, "connection refused")
	runCLI(t, down+","+down2, "--timeout", "1m", "acquire", "db").mustFail(t, 1, "no server of the list answered")
}

// A mistyped pool's error names the pools close to it.
func TestMistypedPoolSuggestsNames(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "orders-db", ConcurrencyLimit: 1})
	runCLI(t, ts.addr, "acquire", "order-db").mustFail(t, 1, `pool "order-db" not found (did you mean "orders-db"?); create it first`, "(NOT_FOUND POOL_NOT_FOUND)")
}
