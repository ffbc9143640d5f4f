package server

import (
	"context"
	"embed"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// webFiles are the status page's files: plain HTML, CSS and JavaScript,
// with no build step.
//
//go:embed web
var webFiles embed.FS

// HTTPHandler returns the handler of the server's HTTP listener:
//
//	GET /             the status page (pools, utilisation, recent events)
//	GET /api/pools    pools with their configured limits and live status, as JSON
//	GET /api/pools/{name}/leases  a pool's live leases (who holds what), as JSON
//	GET /api/events   recent events, newest first, as JSON
//	GET /metrics      Prometheus metrics
//	GET /healthz      200 while the process runs
//	GET /readyz       200 while the server serves; 503 once shutdown starts
//
// When the server's auth.Config requires credentials (admin names, an admin
// token, or verified client certificates), every path but /healthz and
// /readyz requires a verified client certificate (any name its client CA
// signed) or the admin token as "Authorization: Bearer <token>", and is
// refused with 401 otherwise.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Serving() {
			writeText(w, http.StatusOK, "ready\n")
			return
		}
		writeText(w, http.StatusServiceUnavailable, "not ready: the server is shutting down\n")
	})
	metrics := promhttp.HandlerFor(s.metrics.Registry(), promhttp.HandlerOpts{
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	})
	mux.Handle("GET /metrics", s.httpAuth(metrics))
	mux.Handle("GET /api/pools", s.httpAuth(http.HandlerFunc(s.apiPools)))
	mux.Handle("GET /api/pools/{name}/leases", s.httpAuth(http.HandlerFunc(s.apiPoolLeases)))
	mux.Handle("GET /api/events", s.httpAuth(http.HandlerFunc(s.apiEvents)))
	mux.Handle("GET /assets/{name}", s.httpAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// {name} is one path segment: it cannot leave web/.
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, webFiles, "web/"+r.PathValue("name"))
	})))
	mux.Handle("GET /{$}", s.httpAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, webFiles, "web/index.html")
	})))
	return securityHeaders(mux)
}

// Serving reports whether the server serves: true until shutdown starts,
// false from then on (gRPC health reports NOT_SERVING from the same
// moment).
func (s *Server) Serving() bool {
	resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// httpAuth requires a verified client certificate or the admin token when
// the server's auth.Config asks for credentials.
func (s *Server) httpAuth(h http.Handler) http.Handler {
	if !s.auth().HTTPNeedsCredentials() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			h.ServeHTTP(w, r)
			return
		}
		if scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok &&
			strings.EqualFold(scheme, "bearer") && s.auth().IsAdminToken(strings.TrimSpace(tok)) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
		writeText(w, http.StatusUnauthorized, "this endpoint needs credentials: "+s.auth().HTTPWays()+"\n")
	})
}

// securityHeaders sets headers that keep the status page to itself: no
// inline scripts, no framing, no sniffing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
