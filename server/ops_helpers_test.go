package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/tlstest"
)

// opsServer is a server with a fake clock that serves gRPC (over TLS when
// given a auth.TLS) and its HTTP handler, both on loopback ports. It stops
// at the end of the test.
type opsServer struct {
	t     *testing.T
	srv   *Server
	clock *fakeclock.Clock
	addr  string
	http  *httptest.Server
	stop  context.CancelFunc
	done  chan error
}

func startOps(t *testing.T, cfg Config, st *auth.TLS) *opsServer {
	t.Helper()
	fc := fakeclock.New(testStart)
	cfg.Clock = fc
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	srv := New(cfg)
	var opts []grpc.ServerOption
	if st != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(st.GRPC)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &opsServer{t: t, srv: srv, clock: fc, addr: lis.Addr().String(), stop: cancel, done: make(chan error, 1)}
	gs := srv.GRPCServer(opts...)
	go func() { o.done <- srv.ServeGRPC(ctx, gs, lis) }()
	o.http = httptest.NewUnstartedServer(srv.HTTPHandler())
	if st != nil {
		// httptest puts its own certificate in a config without
		// Certificates (the server's serves through GetCertificate).
		cfg := st.HTTP.Clone()
		cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{*cert}
		o.http.TLS = cfg
		o.http.StartTLS()
	} else {
		o.http.Start()
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-o.done:
			if err != nil {
				t.Errorf("ServeGRPC: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("ServeGRPC did not return after its context ended")
		}
		o.http.Close()
	})
	return o
}

// env returns test helpers over a new connection made with opts.
func (o *opsServer) env(opts ...grpc.DialOption) *env {
	o.t.Helper()
	conn := dial(o.t, o.addr, opts...)
	o.t.Cleanup(func() { conn.Close() })
	return &env{t: o.t, srv: o.srv, clock: o.clock, addr: o.addr, conn: conn,
		lim: tollgatev1.NewLimiterServiceClient(conn), adm: tollgatev1.NewAdminServiceClient(conn)}
}

// get fetches path from the HTTP listener with client, adding headers
// (name, value pairs), and returns the status code and body.
func (o *opsServer) get(client *http.Client, path string, headers ...string) (int, string) {
	o.t.Helper()
	if client == nil {
		client = o.http.Client()
	}
	req, err := http.NewRequest("GET", o.http.URL+path, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		o.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		o.t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// testPKI is a CA with a server certificate for loopback.
type testPKI struct {
	ca     *tlstest.CA
	server *auth.TLS
}

// newPKI makes a CA and the server's TLS setup; with mtls, the server
// verifies client certificates against the CA.
func newPKI(t *testing.T, mtls bool) *testPKI {
	t.Helper()
	ca := tlstest.NewCA(t, "tollgate test CA")
	dir := t.TempDir()
	f := ca.WriteFiles(t, dir, "server")
	clientCA := ""
	if mtls {
		clientCA = f.CA
	}
	st, err := auth.LoadTLS(f.Cert, f.Key, clientCA)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, server: st}
}

// creds returns dial options for TLS to the server, presenting a client
// certificate with common name cn (none when cn is "").
func (p *testPKI) creds(t *testing.T, cn string) grpc.DialOption {
	t.Helper()
	return grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, cn)))
}

func (p *testPKI) clientTLS(t *testing.T, cn string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12}
	if cn != "" {
		cfg.Certificates = []tls.Certificate{p.ca.Issue(t, cn)}
	}
	return cfg
}

// httpClient returns an HTTP client for the server's TLS listener,
// presenting a client certificate named cn (none when cn is "").
func (p *testPKI) httpClient(t *testing.T, cn string) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientTLS(t, cn)}, Timeout: waitLimit}
}

// bearer sends "authorization: Bearer tok" with every call, over any
// transport.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func withToken(tok string) grpc.DialOption { return grpc.WithPerRPCCredentials(bearer(tok)) }
