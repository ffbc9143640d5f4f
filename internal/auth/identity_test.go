package auth

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// WithIdentity works out a stream's identity once: requests under its
// context get the same client keys as a fresh look would give, without
// reading the peer again.
func TestWithIdentity(t *testing.T) {
	a := New(&Config{})
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	fresh := a.Identify(ctx)
	if got := fresh.ClientKey(""); got != "conn:127.0.0.1:4242" {
		t.Fatalf("ClientKey(\"\") = %q", got)
	}
	if got := fresh.ClientKey("w1"); got != "client:w1" {
		t.Fatalf("ClientKey(w1) = %q", got)
	}
	stream := a.WithIdentity(ctx)
	// A request's context derives from the stream's; the peer it names is
	// not looked at again.
	req := peer.NewContext(stream, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}})
	if got := a.Identify(req); got.ClientKey("") != fresh.ClientKey("") || got.Addr != "127.0.0.1" {
		t.Fatalf("Identify under WithIdentity = %+v; want %+v", got, fresh)
	}
	if got := a.Identify(context.Background()).ClientKey(""); got != "addr:" {
		t.Fatalf("ClientKey of a call without a peer = %q", got)
	}
}

// TestIdentifyOncePerConnection: calls of one connection (one *peer.Peer,
// as grpc-go gives them) get the same keys as before, with the peer read
// once: no allocation per call; the bearer token is still read per call,
// and another connection gets its own keys.
func TestIdentifyOncePerConnection(t *testing.T) {
	a := New(&Config{AdminToken: "s3cret"})
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 4242}}
	ctx := peer.NewContext(context.Background(), p)
	if got := a.Identify(ctx); got.ClientKey("") != "conn:[::1]:4242" || got.Addr != "::1" || got.Principal() != "" {
		t.Fatalf("Identify = %+v; want the connection [::1]:4242", got)
	}
	if n := testing.AllocsPerRun(100, func() { a.Identify(ctx) }); n != 0 {
		t.Fatalf("Identify of a known connection allocates %v times; want 0", n)
	}
	withToken := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer s3cret"))
	if got := a.Identify(withToken); got.Principal() != TokenPrincipal || got.ClientKey("") != "id:"+TokenPrincipal {
		t.Fatalf("Identify with the admin token = %+v; want its principal", got)
	}
	other := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 7}})
	if got := a.Identify(other).ClientKey(""); got != "conn:10.0.0.2:7" {
		t.Fatalf("ClientKey of another connection = %q", got)
	}
}

// TestDeclaredKeyKeptPerStream: on a stream (WithIdentity) the key of a
// declared client id is built once while the id stays the same, and is
// the same key a single call gets; another id gets its own.
func TestDeclaredKeyKeptPerStream(t *testing.T) {
	a := New(nil)
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}}
	call := peer.NewContext(context.Background(), p)
	stream := a.WithIdentity(call)
	id := a.Identify(stream)
	if got, want := id.ClientKey("worker-1"), a.Identify(call).ClientKey("worker-1"); got != want || got != "client:worker-1" {
		t.Fatalf("ClientKey(worker-1) on a stream = %q, on a call %q; want client:worker-1", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = a.Identify(stream).ClientKey("worker-1") }); n != 0 {
		t.Fatalf("ClientKey of the stream's declared id allocates %v times; want 0", n)
	}
	if got := id.ClientKey("worker-2"); got != "client:worker-2" {
		t.Fatalf("ClientKey(worker-2) = %q", got)
	}
	if got := id.ClientKey("worker-1"); got != "client:worker-1" {
		t.Fatalf("ClientKey(worker-1) after worker-2 = %q", got)
	}
}
