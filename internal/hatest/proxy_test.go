package hatest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

// TestProxyBlackholeAndHeal: through the proxy a line is echoed; while
// blackholed nothing comes back on the open connection and a new
// connection gets nothing either; after Heal both get every byte they sent.
func TestProxyBlackholeAndHeal(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	send := func(c net.Conn, s string) {
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(r *bufio.Reader, c net.Conn, want string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	silent := func(r *bufio.Reader, c net.Conn) {
		t.Helper()
		// A blackholed link answers nothing; were it forwarding, the echo
		// would be back in far less than this.
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if got, err := r.ReadString('\n'); err == nil || got != "" {
			t.Fatalf("read %q, %v through a blackholed proxy", got, err)
		}
	}

	c1, r1 := dial()
	send(c1, "one\n")
	expect(r1, c1, "one\n")

	p.Blackhole()
	send(c1, "two\n")
	silent(r1, c1)
	c2, r2 := dial()
	send(c2, "three\n")
	silent(r2, c2)

	p.Heal()
	expect(r1, c1, "two\n")
	expect(r2, c2, "three\n")
	send(c1, "four\n")
	expect(r1, c1, "four\n")
}

// TestProxyClose: Close closes the connections through the proxy.
func TestProxyClose(t *testing.T) {
	p := StartProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "x\n"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	// EOF, or a reset when the echo was unread: either way, not a timeout.
	_, err = io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection through the proxy stayed open after Close: %v", err)
	}
}
