package auth

import (
	"context"
	"net"
	"testing"

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
