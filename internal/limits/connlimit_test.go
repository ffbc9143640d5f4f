package limits

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter/fakeclock"
)

// fakeConn is a connection from addr that records its Close.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

func from(ip string, port int) *fakeConn {
	return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: port}}
}

// fakeListener hands out the connections sent on conns; closing conns
// makes Accept fail.
type fakeListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, errors.New("listener closed")
	}
	return c, nil
}

func newLimiter(total, perIP int) (*Quotas, *ConnLimiter, *fakeclock.Clock) {
	q := New(Limits{})
	l := q.NewConnLimiter(total, perIP, KindConns, KindConnsPerIP, time.Minute)
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l.SetClock(clk.Now)
	return q, l, clk
}

// busy begins a call on c that does not end.
func busy(c *Conn) { Begin(c.RemoteAddr(), false) }

func TestPerIPBoundRefusesWhenEveryConnectionIsBusy(t *testing.T) {
	q, l, _ := newLimiter(0, 2)
	a, b := l.admit(from("10.0.0.1", 1)), l.admit(from("10.0.0.1", 2))
	busy(a)
	busy(b)
	if c := l.admit(from("10.0.0.1", 3)); c != nil {
		t.Fatal("a third connection from one address got in while both others make calls")
	}
	if q.Refused(KindConnsPerIP) != 1 || q.Refused(KindConns) != 0 {
		t.Fatalf("refusals per IP %d, in total %d; want 1 and 0", q.Refused(KindConnsPerIP), q.Refused(KindConns))
	}
	if c := l.admit(from("10.0.0.2", 1)); c == nil {
		t.Fatal("another address was refused")
	}
	if l.Open() != 3 || l.Evicted() != 0 {
		t.Fatalf("%d open, %d evicted; want 3 and 0", l.Open(), l.Evicted())
	}
}

func TestANewcomerTakesThePlaceOfAConnectionDoingNothing(t *testing.T) {
	_, l, _ := newLimiter(0, 3)
	raw1, raw2, raw3 := from("10.0.0.1", 1), from("10.0.0.1", 2), from("10.0.0.1", 3)
	watching, _, working := l.admit(raw1), l.admit(raw2), l.admit(raw3)
	Begin(watching.RemoteAddr(), true)
	busy(working)
	// The second made no call: it goes first, although watching is older.
	fourth := l.admit(from("10.0.0.1", 4))
	if fourth == nil || !raw2.closed.Load() || raw1.closed.Load() {
		t.Fatalf("with a silent connection: silent closed %v, watching closed %v", raw2.closed.Load(), raw1.closed.Load())
	}
	busy(fourth)
	// Then a connection with only watches in progress.
	if l.admit(from("10.0.0.1", 5)) == nil || !raw1.closed.Load() || raw3.closed.Load() {
		t.Fatalf("with a watching connection: watching closed %v, working closed %v", raw1.closed.Load(), raw3.closed.Load())
	}
	if l.Evicted() != 2 || l.Open() != 3 {
		t.Fatalf("%d evicted, %d open; want 2 and 3", l.Evicted(), l.Open())
	}
}

func TestTotalBoundEvictsFromTheHeaviestAddress(t *testing.T) {
	q, l, _ := newLimiter(3, 0)
	light := from("10.0.0.1", 1)
	l.admit(light)
	heavy1, heavy2 := from("10.0.0.2", 1), from("10.0.0.2", 2)
	l.admit(heavy1)
	l.admit(heavy2)
	if l.admit(from("10.0.0.3", 1)) == nil {
		t.Fatal("a newcomer was refused while silent connections hold the places")
	}
	if !heavy1.closed.Load() || light.closed.Load() || heavy2.closed.Load() {
		t.Fatalf("closed: light %v, heavy1 %v, heavy2 %v; want the oldest of the heaviest address", light.closed.Load(), heavy1.closed.Load(), heavy2.closed.Load())
	}
	if q.Refused(KindConns) != 0 {
		t.Fatal("an admitted newcomer counted as refused")
	}
}

func TestCloseGivesThePlaceBackOnce(t *testing.T) {
	_, l, _ := newLimiter(0, 1)
	c := l.admit(from("10.0.0.1", 1))
	busy(c)
	_ = c.Close()
	_ = c.Close()
	if l.Open() != 0 {
		t.Fatalf("%d open after Close", l.Open())
	}
	if l.admit(from("10.0.0.1", 2)) == nil || l.Open() != 1 {
		t.Fatalf("the place was not given back: %d open", l.Open())
	}
}

func TestSweepClosesConnectionsOnlyWatching(t *testing.T) {
	_, l, clk := newLimiter(0, 0)
	rawW, rawB, rawQ := from("10.0.0.1", 1), from("10.0.0.1", 2), from("10.0.0.1", 3)
	w, b, quiet := l.admit(rawW), l.admit(rawB), l.admit(rawQ)
	Begin(w.RemoteAddr(), false)() // a call that ended: quiet from now
	Begin(w.RemoteAddr(), true)
	busy(b)
	Begin(b.RemoteAddr(), true)
	Begin(quiet.RemoteAddr(), false)() // nothing in progress: gRPC's idle close is for it

	clk.Advance(time.Minute - time.Nanosecond)
	l.Sweep()
	if rawW.closed.Load() {
		t.Fatal("a watching connection was closed before its idle time")
	}
	clk.Advance(time.Nanosecond)
	l.Sweep()
	if !rawW.closed.Load() || rawB.closed.Load() || rawQ.closed.Load() || l.Open() != 2 {
		t.Fatalf("after the idle time: watching closed %v, busy %v, quiet %v; %d open", rawW.closed.Load(), rawB.closed.Load(), rawQ.closed.Load(), l.Open())
	}
}

func TestListenAcceptsWithinTheBounds(t *testing.T) {
	_, l, _ := newLimiter(0, 1)
	fl := &fakeListener{conns: make(chan net.Conn, 3)}
	first, refused, other := from("10.0.0.1", 1), from("10.0.0.1", 2), from("10.0.0.2", 1)
	fl.conns <- first
	fl.conns <- refused
	fl.conns <- other
	close(fl.conns)
	lis := l.Listen(fl)
	c, err := lis.Accept()
	if err != nil || c.(*Conn).Conn != first {
		t.Fatalf("first Accept = %v, %v", c, err)
	}
	busy(c.(*Conn))
	c, err = lis.Accept()
	if err != nil || c.(*Conn).Conn != other || !refused.closed.Load() {
		t.Fatalf("second Accept = %v, %v; want the refused connection closed and skipped", c, err)
	}
	if _, err := lis.Accept(); err == nil {
		t.Fatal("Accept on a closed listener succeeded")
	}
}

func TestHTTPConnStateMarksRequests(t *testing.T) {
	_, l, _ := newLimiter(0, 1)
	raw := from("10.0.0.1", 1)
	c := l.admit(raw)
	// Through TLS too: the limiter finds its connection under it.
	l.HTTPConnState(tls.Server(c, &tls.Config{}), http.StateActive)
	if l.admit(from("10.0.0.1", 2)) != nil {
		t.Fatal("a newcomer took the place of a connection serving a request")
	}
	l.HTTPConnState(c, http.StateIdle)
	if l.admit(from("10.0.0.1", 3)) == nil || !raw.closed.Load() {
		t.Fatal("a connection between requests kept its place from a newcomer")
	}
	l.HTTPConnState(from("10.0.0.9", 1), http.StateActive) // not the limiter's: ignored
}

func TestBeginIgnoresOtherAddresses(t *testing.T) {
	end := Begin(&net.TCPAddr{}, false)
	end()
}
