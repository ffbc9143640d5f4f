package limiter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestCreatePoolDefaultsAndValidation(t *testing.T) {
	te := newTestEngine(t)
	info := te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := info.Config
	if c.DefaultLeaseTTL != DefaultLeaseTTL || c.MaxLeaseTTL != DefaultMaxLeaseTTL || c.MaxWaiters != DefaultMaxWaiters || c.Burst != 0 {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if !info.CreateTime.Equal(epoch) {
		t.Fatalf("CreateTime = %v", info.CreateTime)
	}
	r := te.mustCreate(t, PoolConfig{Name: "api", Rate: 2.5})
	if r.Config.Burst != 3 {
		t.Fatalf("burst default = %d; want ceil(2.5) = 3", r.Config.Burst)
	}
	if _, err := te.CreatePool(PoolConfig{Name: "db", ConcurrencyLimit: 1}); !errors.Is(err, apierr.ErrPoolExists) {
		t.Fatalf("duplicate create: %v", err)
	}

	bad := []struct {
		cfg  PoolConfig
		want string
	}{
		{PoolConfig{Name: "", ConcurrencyLimit: 1}, "empty"},
		{PoolConfig{Name: "has space", ConcurrencyLimit: 1}, "position 3"},
		{PoolConfig{Name: strings.Repeat("a", 129), ConcurrencyLimit: 1}, "129"},
		{PoolConfig{Name: "x"}, "neither"},
		{PoolConfig{Name: "x", ConcurrencyLimit: -1}, "concurrency_limit"},
		{PoolConfig{Name: "x", Rate: -1}, "rate"},
		{PoolConfig{Name: "x", ConcurrencyLimit: 1, MaxLeaseTTL: time.Millisecond}, "max_lease_ttl"},
		{PoolConfig{Name: "x", ConcurrencyLimit: 1, DefaultLeaseTTL: time.Hour, MaxLeaseTTL: time.Minute}, "default_lease_ttl"},
		{PoolConfig{Name: "x", ConcurrencyLimit: 1, MaxWaiters: -5}, "max_waiters"},
		{PoolConfig{Name: "x", ConcurrencyLimit: 1, Description: strings.Repeat("d", 2000)}, "description"},
	}
	for _, b := range bad {
		_, err := te.CreatePool(b.cfg)
		wantReason(t, err, apierr.ErrInvalidArgument)
		if !strings.Contains(err.Error(), b.want) {
			t.Errorf("CreatePool(%.40q...): %v; want message mentioning %q", b.cfg.Name, err, b.want)
		}
	}
	for _, name := range []string{"orders-db", "api.github.com", "gpu/workers:1", "A_b"} {
		if err := ValidatePoolName(name); err != nil {
			t.Errorf("ValidatePoolName(%q) = %v", name, err)
		}
	}
}

func TestAcquireReleaseConcurrencyLimit(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 3})
	a := te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2, ClientID: "c1", Description: "job"})
	if a.Weight != 2 || a.ClientID != "c1" || a.TTL != DefaultLeaseTTL || !a.ExpireTime.Equal(epoch.Add(DefaultLeaseTTL)) {
		t.Fatalf("lease = %+v", a)
	}
	b := te.mustAcquire(t, AcquireRequest{Pool: "db"})
	if b.FencingToken <= a.FencingToken {
		t.Fatalf("fencing tokens not increasing: %d then %d", a.FencingToken, b.FencingToken)
	}
	_, err := te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1, NoWait: true})
	wantReason(t, err, apierr.ErrNoCapacity)
	if s := te.status(t, "db"); s.Held != 3 || s.Leases != 2 || s.Rejected != 1 || s.Granted != 2 {
		t.Fatalf("status = %+v", s)
	}
	if _, err := te.Release("db", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	wantReason(t, errOf(te.Release("db", a.FencingToken)), apierr.ErrLeaseNotFound)
	if s := te.status(t, "db"); s.Held != 1 || s.Released != 1 {
		t.Fatalf("status after release = %+v", s)
	}
	te.mustAcquire(t, AcquireRequest{Pool: "db", Weight: 2})
}

func TestAcquireBadRequests(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2, MaxLeaseTTL: time.Minute})
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 10, Burst: 4})
	ctx := context.Background()
	cases := []struct {
		req  AcquireRequest
		kind *apierr.Error
		want string
	}{
		{AcquireRequest{Pool: "nope", Weight: 1}, apierr.ErrPoolNotFound, "not found"},
		{AcquireRequest{Pool: "bad name!", Weight: 1}, apierr.ErrInvalidArgument, "pool name"},
		{AcquireRequest{Pool: "db", Weight: 0}, apierr.ErrInvalidArgument, "weight 0"},
		{AcquireRequest{Pool: "db", Weight: 3}, apierr.ErrInvalidArgument, "concurrency limit 2"},
		{AcquireRequest{Pool: "api", Weight: 5}, apierr.ErrInvalidArgument, "burst of 4"},
		{AcquireRequest{Pool: "db", Weight: 1, TTL: time.Hour}, apierr.ErrInvalidArgument, "max_lease_ttl 1m0s"},
		{AcquireRequest{Pool: "db", Weight: 1, TTL: time.Millisecond}, apierr.ErrInvalidArgument, "out of range"},
		{AcquireRequest{Pool: "db", Weight: 1, TTL: -time.Second}, apierr.ErrInvalidArgument, "negative"},
		{AcquireRequest{Pool: "db", Weight: 1, WaitTimeout: -time.Second}, apierr.ErrInvalidArgument, "negative"},
		{AcquireRequest{Pool: "db", Weight: 1, ClientID: strings.Repeat("c", 300)}, apierr.ErrInvalidArgument, "client id"},
	}
	for _, c := range cases {
		_, err := te.Acquire(ctx, c.req)
		wantReason(t, err, c.kind)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Acquire(%+v) = %v; want message with %q", c.req, err, c.want)
		}
	}
	if s := te.status(t, "db"); s.Held != 0 || s.Waiting != 0 {
		t.Fatalf("bad requests changed state: %+v", s)
	}
}

func TestListPoolsPages(t *testing.T) {
	te := newTestEngine(t)
	for _, n := range []string{"c", "a", "e", "b", "d"} {
		te.mustCreate(t, PoolConfig{Name: n, ConcurrencyLimit: 1})
	}
	var got []string
	after := ""
	for {
		page, more := te.ListPools(after, 2)
		for _, p := range page {
			got = append(got, p.Config.Name)
		}
		if !more {
			break
		}
		after = page[len(page)-1].Config.Name
	}
	if strings.Join(got, ",") != "a,b,c,d,e" {
		t.Fatalf("pages = %v", got)
	}
}

func TestDeletePool(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", Owner: "session-1"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	wantReason(t, te.DeletePool("db", false), apierr.ErrPoolBusy)
	if w.finished() {
		t.Fatal("refused delete disturbed a waiter")
	}
	if err := te.DeletePool("db", true); err != nil {
		t.Fatal(err)
	}
	_, err := w.result(t)
	wantReason(t, err, apierr.ErrPoolDeleted)
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Reason != EndPoolDeleted || ended[0].Lease.FencingToken != l.FencingToken || ended[0].Owner != "session-1" {
		t.Fatalf("ended = %+v", ended)
	}
	wantReason(t, errOf(te.Release("db", l.FencingToken)), apierr.ErrPoolNotFound)
	wantReason(t, te.DeletePool("db", false), apierr.ErrPoolNotFound)
	// The name is free again, and the old pool's timers do nothing.
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1})
	te.clk.Advance(time.Hour)
	if s := te.status(t, "db"); s.Expired != 0 || s.Held != 0 {
		t.Fatalf("new pool = %+v", s)
	}
}

// A pool deleted and created again under the same name continues its
// fencing tokens above the deleted pool's.
func TestRecreatedPoolContinuesFencingTokens(t *testing.T) {
	te := newTestEngine(t)
	var last uint64
	for round := 0; round < 3; round++ {
		te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 5})
		for i := 0; i < 3; i++ {
			l := te.mustAcquire(t, AcquireRequest{Pool: "db"})
			if l.FencingToken <= last {
				t.Fatalf("round %d: token %d not above %d", round, l.FencingToken, last)
			}
			last = l.FencingToken
		}
		if err := te.DeletePool("db", true); err != nil {
			t.Fatal(err)
		}
	}
	te.RaiseTokenFloor(5) // lower than the floor: no effect
	te.mustCreate(t, PoolConfig{Name: "other", ConcurrencyLimit: 1})
	if l := te.mustAcquire(t, AcquireRequest{Pool: "other"}); l.FencingToken != last+1 {
		t.Fatalf("new pool's first token = %d; want %d", l.FencingToken, last+1)
	}
}

func TestCloseFailsWaitersAndTakes(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 1, Rate: 1, Burst: 1})
	te.mustAcquire(t, AcquireRequest{Pool: "db"})
	w := te.startAcquire(t, AcquireRequest{Pool: "db"})
	takeErr := make(chan error, 1)
	go func() {
		_, err := te.Take(context.Background(), "db", 1, time.Hour)
		takeErr <- err
	}()
	testwait.For(t, "a take to reserve tokens", func() bool { return te.status(t, "db").TokensAvailable < 0 })
	te.Close()
	_, err := w.result(t)
	wantReason(t, err, apierr.ErrShuttingDown)
	wantReason(t, <-takeErr, apierr.ErrShuttingDown)
	_, err = te.Acquire(context.Background(), AcquireRequest{Pool: "db", Weight: 1})
	wantReason(t, err, apierr.ErrShuttingDown)
	te.Close() // idempotent
}
