package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/hatest"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestProviderKill9: a worker process offers its slots to a passive pool
// with `tollgate resource provide`; another client holds a lease on one of
// them; the worker is killed with SIGKILL. Within the provider's keep-alive
// TTL (in practice at once: the kernel closes the dead process's
// connection) its slots leave the pool, and the holder's lease ends with a
// revocation that names the provider.
func TestProviderKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary and runs a server and a provider")
	}
	const ttl = 2 * time.Second
	srv := newE2EServer(t)
	srv.Start()

	c, err := client.Dialer{ClientID: "holder"}.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE}}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}

	worker, out, exited := startProvider(t, srv, "--ttl", ttl.String(), "--attr", "host=worker-7")

	testwait.For(t, "the worker's slots to join the pool", func() bool {
		r, err := adm.ListResources(ctx, &tollgatev1.ListResourcesRequest{Pool: "gpu"})
		return err == nil && len(r.GetResources()) == 2
	})
	l, err := c.Acquire(ctx, "gpu", client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rs := l.Resources(); len(rs) != 1 || rs[0].Provider != "worker-7" || rs[0].Attributes["host"] != "worker-7" {
		t.Fatalf("lease bound to %+v", rs)
	}

	killed := time.Now()
	if err := worker.Process.Kill(); err != nil { // SIGKILL: no goodbye
		t.Fatal(err)
	}
	<-exited
	select {
	case <-l.Done():
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the holder was not told within %v of the kill; worker output:\n%s", ttl+10*time.Second, out.String())
	}
	told := time.Since(killed)
	t.Logf("holder told %v after the kill (provider TTL %v)", told, ttl)
	if !errors.Is(l.Err(), apierr.ErrLeaseRevoked) || !strings.Contains(l.Err().Error(), `provider "worker-7"`) {
		t.Fatalf("lease ended with %v", l.Err())
	}
	if told > ttl+5*time.Second {
		t.Errorf("the holder was told %v after the kill; the provider's TTL is %v", told, ttl)
	}
	r, err := adm.ListResources(ctx, &tollgatev1.ListResourcesRequest{Pool: "gpu"})
	if err != nil || len(r.GetResources()) != 0 || len(r.GetProviders()) != 0 {
		t.Fatalf("after the kill: %v, %v", r, err)
	}
}

// TestPassivePoolAcrossServerKill9: a worker process offers its slots,
// another client holds a lease on one, and the server is killed with
// SIGKILL and started again on the same data directory. The worker
// registers again by itself and the holder's lease is re-adopted on the
// same slot: it is never lost, and the slot is held by no one else.
func TestPassivePoolAcrossServerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary and kills its server")
	}
	srv := newE2EServer(t)
	srv.Start()

	c, err := client.Dialer{ClientID: "holder"}.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE,
		DefaultLeaseTtl: durationpb.New(4 * time.Second)}}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	var out *strings.Builder
	t.Cleanup(func() { // after the worker's end (cleanups run last first): its output is complete
		if t.Failed() {
			t.Logf("worker:\n%s\nserver, first run:\n%s\nserver, last run:\n%s", out.String(), srv.Log(1), srv.LastLog())
		}
	})
	_, out, _ = startProvider(t, srv, "--ttl", "3s")
	testwait.For(t, "the worker's slots", func() bool {
		r, err := adm.ListResources(ctx, &tollgatev1.ListResourcesRequest{Pool: "gpu"})
		return err == nil && len(r.GetResources()) == 2
	})
	l, err := c.Acquire(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	slot := l.Resources()[0].ID

	srv.Kill() // SIGKILL: nothing is released, nothing is told
	srv.Start()
	// Either the worker registers again and the holder's renewal re-adopts
	// the lease (within the recovery window), or the lease ends: the
	// holder's local deadline passes first, or the window ends without
	// the slot offered and the lease is revoked. Wait for whichever comes;
	// the bound is only a guard against a hang.
	readopted := func() bool {
		r, err := adm.ListResources(ctx, &tollgatev1.ListResourcesRequest{Pool: "gpu"})
		if err != nil || len(r.GetResources()) != 2 || len(r.GetProviders()) != 1 {
			return false
		}
		for _, res := range r.GetResources() {
			if res.GetResource().GetId() == slot && res.GetLeaseId() == l.ID() && res.GetResource().GetProviderId() == "worker-7" {
				return true
			}
		}
		return false
	}
	for !readopted() {
		select {
		case <-l.Done():
			t.Fatalf("the lease was lost across the server's kill: %v", l.Err())
		case <-ctx.Done():
			t.Fatal("the worker did not register again and the lease was not re-adopted, nor lost, before the test's context ended")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the restart: %v", err)
	}
	srv.CheckLogs("level=ERROR")
}

// startProvider runs `tollgate resource provide gpu --id worker-7 ...
// slot-1 slot-2` against srv, with the extra flags given, until the end
// of the test. It returns the process, its output and a channel closed
// when it has exited.
func startProvider(t *testing.T, srv *hatest.Server, flags ...string) (*exec.Cmd, *strings.Builder, chan struct{}) {
	t.Helper()
	out := &strings.Builder{}
	args := append([]string{"resource", "provide", "gpu", "--id", "worker-7", "--server", srv.Addr}, flags...)
	worker := exec.Command(srv.Bin(), append(args, "slot-1", "slot-2")...)
	worker.Stdout, worker.Stderr = out, out
	worker.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = worker.Wait(); close(exited) }()
	t.Cleanup(func() { _ = worker.Process.Kill(); <-exited })
	return worker, out, exited
}
