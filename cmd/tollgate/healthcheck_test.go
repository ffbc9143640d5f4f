package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	ts := newCLIServer(t)
	web := httptest.NewServer(ts.srv.HTTPHandler())
	defer web.Close()
	r := runCLI(t, "", "healthcheck", "--url", web.URL+"/readyz").mustSucceed(t)
	if !strings.Contains(r.stdout, "200 OK") {
		t.Fatalf("stdout: %q", r.stdout)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	runCLI(t, "", "healthcheck", "--url", down.URL+"/readyz").mustFail(t, 1, "answered 503 Service Unavailable")
	down.Close()
	runCLI(t, "", "healthcheck", "--url", down.URL+"/readyz").mustFail(t, 1, "connection refused")
	runCLI(t, "", "healthcheck", "--url", "::nope").mustFail(t, 2, "--url")
}

// Without --url, healthcheck asks the gRPC health of --server, or of
// $TOLLGATE_SERVER: not some other server's.
func TestHealthcheckServer(t *testing.T) {
	ts := newCLIServer(t)
	r := runCLI(t, ts.addr, "healthcheck").mustSucceed(t)
	if r.stdout != ts.addr+": SERVING\n" {
		t.Fatalf("stdout: %q", r.stdout)
	}
	var stdout, stderr cliBuffer
	env := func(k string) string {
		if k == "TOLLGATE_SERVER" {
			return ts.addr
		}
		return ""
	}
	if code := run(context.Background(), []string{"healthcheck"}, &stdout, &stderr, env); code != 0 || stdout.String() != ts.addr+": SERVING\n" {
		t.Fatalf("with TOLLGATE_SERVER: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	runCLI(t, freeAddr(t), "healthcheck", "--timeout", "2s").mustFail(t, 1, "connection refused")
}

// healthcheck --url https://... verifies the server with --tls-ca: a
// private CA works.
func TestHealthcheckPrivateCA(t *testing.T) {
	web := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer web.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: web.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI(t, "", "healthcheck", "--url", web.URL+"/readyz").mustFail(t, 1, "certificate")
	runCLI(t, "", "healthcheck", "--url", web.URL+"/readyz", "--tls-ca", caFile).mustSucceed(t)
}
