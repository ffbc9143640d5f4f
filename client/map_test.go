package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

func TestMapKeepsInputOrder(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 3})
	c := ts.dial()

	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	var running concurrency
	got, err := client.Map(ctx(t), c, "db", items, func(ctx context.Context, n int) (string, error) {
		defer running.leave()
		running.enter()
		if client.LeaseFromContext(ctx) == nil {
			return "", errors.New("no lease")
		}
		for range n % 7 { // finish out of order
			runtime.Gosched()
		}
		return fmt.Sprint(n * n), nil
	}, client.WithMaxInFlight(8))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got {
		if s != fmt.Sprint(i*i) {
			t.Fatalf("results[%d] = %q; want %d", i, s, i*i)
		}
	}
	if m := running.most.Load(); m > 3 {
		t.Fatalf("%d calls at once; the limit is 3", m)
	}
	if st := ts.status("db"); st.Granted != 50 || st.Held != 0 {
		t.Fatalf("server: granted=%d held=%d", st.Granted, st.Held)
	}
}

func TestMapError(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	boom := errors.New("boom")
	got, err := client.Map(ctx(t), c, "db", []string{"a", "b", "c", "d"}, func(_ context.Context, s string) (string, error) {
		if s == "c" {
			return "", boom
		}
		return strings.ToUpper(s), nil
	}, client.WithErrorPolicy(client.ContinueOnError(0)))
	mustIs(t, err, boom)
	if !strings.Contains(err.Error(), "item 2: boom") {
		t.Fatalf("error %q does not name the item", err)
	}
	if fmt.Sprintf("%q", got) != `["A" "B" "" "D"]` {
		t.Fatalf("results %q", got)
	}
}

func TestMapEmpty(t *testing.T) {
	c, err := client.Dial("127.0.0.1:1") // never contacted
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := client.Map(ctx(t), c, "db", nil, func(context.Context, int) (int, error) { return 0, nil })
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Map of nothing = %v, %v", got, err)
	}
}
