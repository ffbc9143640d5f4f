package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file is the kill -9 test: a real tollgate process, killed with
// SIGKILL under load and restarted on the same address and data directory,
// twice, while the test process holds leases through the client package and
// changes pools. Afterwards it checks, from what the test process saw:
//   - every acknowledged pool change is there after each restart;
//   - at no instant did more than the limit of holders hold a lease that
//     was valid by their own rule (from the grant to the earlier of their
//     release and their loss: Done, or the local deadline Expiry - margin);
//   - fencing tokens grew in grant order across the restarts.
// Nothing is asserted about timing; every wait has a generous bound.

const (
	e2eLimit   = 3                      // the work pool's concurrency limit
	e2eHolders = 6                      // goroutines competing for it
	e2eTTL     = 2 * time.Second        // holders' lease TTL
	e2eMaxTTL  = 3 * time.Second        // the pool's max TTL (the recovery window follows the 2s in use)
	e2eMargin  = 300 * time.Millisecond // holders' safety margin
	e2ePhase   = 4 * time.Second        // load between kills
	e2eKills   = 2
)

// hold is one lease as its holder saw it.
type hold struct {
	token   uint64
	called  time.Time // Acquire was called
	granted time.Time // Acquire returned the lease
	end     time.Time // released, or lost by the holder's rule
}

// newE2EServer returns the tollgate process under test: built from the
// tree, on a loopback address and a data directory of its own, not
// started yet.
func newE2EServer(t *testing.T) *hatest.Server { return hatest.Standalone(t, buildTollgate(t)) }

func TestKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tollgate binary and runs it for about 15s")
	}
	srv := newE2EServer(t)
	srv.Start()

	admc, err := client.Dialer{ClientID: "e2e-admin"}.Dial(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admc.Close()
	adm := tollgatev1.NewAdminServiceClient(admc.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{
		Name: "work", ConcurrencyLimit: e2eLimit, DefaultLeaseTtl: durationpb.New(e2eTTL), MaxLeaseTtl: durationpb.New(e2eMaxTTL),
	}}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		t.Fatalf("creating the work pool: %v", err)
	}

	stop := make(chan struct{})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		holds []hold
	)
	// Each holder is its own client, as separate processes would be: each
	// reconnects after a kill in its own time. The first two hold long,
	// so that leases are held across every kill.
	for i := 0; i < e2eHolders; i++ {
		c, err := client.Dialer{SafetyMargin: e2eMargin, ClientID: fmt.Sprintf("holder-%d", i)}.Dial(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		long := i < 2
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if h, ok := holdOnce(c, rng, long, stop); ok {
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
				}
			}
		})
	}
	admin := newAdminLoad(adm)
	wg.Go(func() { admin.run(stop) })

	for kill := 1; kill <= e2eKills; kill++ {
		time.Sleep(e2ePhase)
		logPool(t, adm, fmt.Sprintf("before kill %d", kill))
		srv.Kill()
		admin.pause()
		want := admin.acknowledged()
		srv.Start()
		admin.check(t, want, kill)
		admin.resume()
	}
	time.Sleep(e2ePhase)
	logPool(t, adm, "at the end")
	close(stop)
	admin.resume()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	checkHolds(t, holds)
	srv.Kill()
	srv.CheckLogs("level=ERROR")
}

// holdOnce acquires the work pool, holds the lease a little while and
// releases it, and reports the hold as the holder saw it.
func holdOnce(c *client.Client, rng *rand.Rand, long bool, stop <-chan struct{}) (hold, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h := hold{called: time.Now()}
	l, err := c.Acquire(ctx, "work", client.WithTTL(e2eTTL))
	if err != nil {
		select { // nothing held; do not spin while the server is away
		case <-time.After(10 * time.Millisecond):
		case <-stop:
		}
		return hold{}, false
	}
	h.granted, h.token = time.Now(), l.FencingToken()
	// Long holds cross renewals, and kills.
	d := time.Duration(2+rng.IntN(30)) * time.Millisecond
	if long {
		d = time.Duration(500+rng.IntN(2000)) * time.Millisecond
	}
	t := time.NewTimer(d)
	select {
	case <-l.Done():
	case <-t.C:
	}
	t.Stop()
	h.end = time.Now()
	// By the holder's rule, the lease is over at its local deadline even
	// if the keep-alive goroutine has not noticed yet.
	if dl := l.Expiry().Add(-e2eMargin); dl.Before(h.end) {
		h.end = dl
	}
	if h.end.Before(h.granted) {
		h.end = h.granted
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = l.Release(rctx) // lost, released, or unconfirmed: the hold ended at h.end either way
	rcancel()
	return h, true
}

// checkHolds is the external checker of the holds.
func checkHolds(t *testing.T, holds []hold) {
	t.Helper()
	if len(holds) < 50 {
		t.Fatalf("only %d holds in the whole run; the load did not run", len(holds))
	}
	// (b1) at most e2eLimit holders at any instant; at equal times, ends
	// come before starts.
	type event struct {
		at    time.Time
		delta int
	}
	events := make([]event, 0, 2*len(holds))
	for _, h := range holds {
		events = append(events, event{h.granted, +1}, event{h.end, -1})
	}
	sort.Slice(events, func(i, j int) bool {
		if !events[i].at.Equal(events[j].at) {
			return events[i].at.Before(events[j].at)
		}
		return events[i].delta < events[j].delta
	})
	n := 0
	for _, e := range events {
		n += e.delta
		if n > e2eLimit {
			t.Fatalf("%d holders held a valid lease at %v; the limit is %d", n, e.at.Format(time.StampMicro), e2eLimit)
		}
	}
	// (b2) fencing tokens: unique, and a lease granted after another was
	// received (its Acquire called later) has a larger token.
	seen := make(map[uint64]bool, len(holds))
	byCall := append([]hold(nil), holds...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].called.Before(byCall[j].called) })
	for _, h := range holds {
		if seen[h.token] {
			t.Fatalf("fencing token %d granted twice", h.token)
		}
		seen[h.token] = true
	}
	for _, a := range holds {
		// Every hold whose Acquire was called after a was granted.
		i := sort.Search(len(byCall), func(i int) bool { return byCall[i].called.After(a.granted) })
		for _, b := range byCall[i:] {
			if b.token <= a.token {
				t.Fatalf("lease with token %d was granted at %v; an acquire called after that, at %v, got the smaller token %d", a.token, a.granted.Format(time.StampMicro), b.called.Format(time.StampMicro), b.token)
			}
		}
	}
	t.Logf("%d holds checked", len(holds))
}

// logPool logs the work pool's counters (re-adoptions depend on timing, so
// they are reported, not asserted).
func logPool(t *testing.T, adm tollgatev1.AdminServiceClient, when string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: "work"}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("%s: GetPool(work): %v", when, err)
	}
	s := resp.GetStatus()
	t.Logf("%s: work pool held=%d granted=%d readopted=%d released=%d expired=%d last_fencing_token=%d", when, s.GetHeld(), s.GetGranted(), s.GetReadopted(), s.GetReleased(), s.GetExpired(), s.GetLastFencingToken())
}

// adminLoad creates, updates and deletes a few pools in a loop, and
// remembers the last acknowledged state of each, unless a change to it was
// in flight or failed (was cut by a kill) since.
type adminLoad struct {
	adm   tollgatev1.AdminServiceClient
	rng   *rand.Rand
	names []string

	mu      sync.Mutex
	paused  bool
	idle    chan struct{} // closed by run when it sees paused
	resumed chan struct{}
	state   map[string]poolState // last acknowledged
	unsure  map[string]bool      // a change was in flight or failed since
	changes int
}

type poolState struct {
	exists bool
	limit  int64
}

func newAdminLoad(adm tollgatev1.AdminServiceClient) *adminLoad {
	a := &adminLoad{adm: adm, rng: rand.New(rand.NewPCG(7, 7)), state: map[string]poolState{}, unsure: map[string]bool{}}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("cfg-%d", i)
		a.names = append(a.names, name)
		a.state[name] = poolState{}
	}
	return a
}

func (a *adminLoad) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		a.mu.Lock()
		if a.paused {
			close(a.idle)
			resumed := a.resumed
			a.mu.Unlock()
			<-resumed
			continue
		}
		name := a.names[a.rng.IntN(len(a.names))]
		cur, unsure := a.state[name], a.unsure[name]
		a.unsure[name] = true // in flight
		a.mu.Unlock()
		next, err := a.change(name, cur, unsure)
		a.mu.Lock()
		if err == nil {
			a.state[name], a.unsure[name] = next, false
			a.changes++
		}
		a.mu.Unlock()
	}
}

// change makes one change to name, whose state is cur (unless unsure:
// then it is read first), and returns the new state once acknowledged.
func (a *adminLoad) change(name string, cur poolState, unsure bool) (poolState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if unsure {
		resp, err := a.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: name})
		switch status.Code(err) {
		case codes.OK:
			cur = poolState{true, resp.GetPool().GetConcurrencyLimit()}
		case codes.NotFound:
			cur = poolState{}
		default:
			return cur, err
		}
	}
	limit := 1 + a.rng.Int64N(100)
	var err error
	switch {
	case !cur.exists:
		_, err = a.adm.CreatePool(ctx, &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: limit}})
		return poolState{true, limit}, err
	case a.rng.IntN(4) == 0:
		_, err = a.adm.DeletePool(ctx, &tollgatev1.DeletePoolRequest{Name: name})
		return poolState{}, err
	default:
		_, err = a.adm.UpdatePool(ctx, &tollgatev1.UpdatePoolRequest{
			Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: limit}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
		})
		return poolState{true, limit}, err
	}
}

// pause stops the loop after its current change and waits for that.
func (a *adminLoad) pause() {
	a.mu.Lock()
	a.paused, a.idle, a.resumed = true, make(chan struct{}), make(chan struct{})
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
	}
}

func (a *adminLoad) resume() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.paused {
		a.paused = false
		close(a.resumed)
	}
}

// acknowledged returns the pools whose last change was acknowledged and
// nothing was in flight for since, with their state.
func (a *adminLoad) acknowledged() map[string]poolState {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]poolState{}
	for name, st := range a.state {
		if !a.unsure[name] {
			out[name] = st
		}
	}
	return out
}

// check verifies (a): the acknowledged state of every pool is what the
// restarted server has.
func (a *adminLoad) check(t *testing.T, want map[string]poolState, kill int) {
	t.Helper()
	a.mu.Lock()
	changes := a.changes
	a.mu.Unlock()
	if changes == 0 {
		t.Fatalf("before kill %d: no pool change was acknowledged", kill)
	}
	for name, st := range want {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := a.adm.GetPool(ctx, &tollgatev1.GetPoolRequest{Name: name}, grpc.WaitForReady(true))
		cancel()
		got := poolState{}
		switch status.Code(err) {
		case codes.OK:
			got = poolState{true, resp.GetPool().GetConcurrencyLimit()}
		case codes.NotFound:
		default:
			t.Fatalf("after kill %d: GetPool(%s): %v", kill, name, err)
		}
		if got != st {
			t.Fatalf("after kill %d: pool %s is %+v; its last acknowledged change made it %+v", kill, name, got, st)
		}
	}
	t.Logf("kill %d: %d acknowledged pool changes so far; %d pools checked", kill, changes, len(want))
}

// buildTollgate builds the tollgate binary once per test binary (with the
// race detector when this test runs with it) and returns its path.
func buildTollgate(t *testing.T) string {
	t.Helper()
	return hatest.Build(t, "github.com/tollgate/tollgate/cmd/tollgate")
}
