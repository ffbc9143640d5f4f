package client_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// clientGoroutines returns the stacks of goroutines running code of package
// client (the test's own package is client_test, which does not match).
func clientGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "tollgate/tollgate/client.") {
			out = append(out, g)
		}
	}
	return out
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 5, Rate: 100})
	c, err := client.Dial(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	var leases []*client.Lease
	for range 3 {
		l, err := c.Acquire(ctx(t), "db", client.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	lctx, cancel := leases[0].Context(ctx(t))
	defer cancel()
	if err := leases[1].Release(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Take(ctx(t), "db", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	// context.AfterFunc's goroutine may still be finishing; everything the
	// client started itself has ended when Close returns.
	waitFor(t, "no client goroutines", func() bool { return len(clientGoroutines()) == 0 })
	if g := clientGoroutines(); len(g) > 0 {
		t.Fatalf("goroutines left:\n%s", strings.Join(g, "\n\n"))
	}
}
