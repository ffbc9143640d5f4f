package main

import (
	"net/http"
	"net/http/httptest"
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
