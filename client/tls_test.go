package client_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server"
	"github.com/tollgate/tollgate/server/tlstest"
)

// A client dialed with a Dialer's TLS talks to a server that requires mutual TLS; its
// certificate's name decides whether it may call AdminService.
func TestDialerTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	files := ca.WriteFiles(t, t.TempDir(), "server")
	st, err := auth.LoadTLS(files.Cert, files.Key, files.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Auth: &auth.Config{AdminNames: []string{"ops"}, ClientCerts: true}})
	if _, err := srv.Engine().CreatePool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeGRPC(sctx, srv.GRPCServer(grpc.Creds(credentials.NewTLS(st.GRPC))), lis) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("ServeGRPC: %v", err)
		}
	})

	dial := func(cn string) *client.Client {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if cn != "" {
			cfg.Certificates = []tls.Certificate{ca.Issue(t, cn)}
		}
		c, err := client.Dialer{TLS: cfg}.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	worker := dial("worker-1")
	ran := false
	if err := worker.Do(ctx(t), "db", func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Do over mutual TLS: ran %v, %v", ran, err)
	}
	_, err = tollgatev1.NewAdminServiceClient(worker.Conn()).ListPools(ctx(t), &tollgatev1.ListPoolsRequest{})
	if e, ok := client.FromError(err); !ok || e.Code != codes.PermissionDenied {
		t.Fatalf("admin call from a worker certificate: %v, want PERMISSION_DENIED", err)
	}
	admin := dial("ops")
	if _, err := tollgatev1.NewAdminServiceClient(admin.Conn()).ListPools(ctx(t), &tollgatev1.ListPoolsRequest{}); err != nil {
		t.Fatalf("admin call from the admin certificate: %v", err)
	}

	// Without a client certificate the handshake fails: nothing is granted.
	anon := dial("")
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := anon.TryAcquire(short, "db"); err == nil {
		t.Fatal("acquire without a client certificate succeeded")
	}
}
