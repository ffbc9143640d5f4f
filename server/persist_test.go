package server

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// durableEnv is a server made by Open on a data directory, serving on
// loopback, that the test can stop and start again on the same directory
// and fake clock (a restart: leases in memory are gone, the store stays).
type durableEnv struct {
	t     *testing.T
	dir   string
	clock *fakeclock.Clock
	log   *syncBuffer
	// limits are the servers' Limits (zero: the defaults).
	limits limits.Limits

	srv  *Server
	adm  tollgatev1.AdminServiceClient
	lim  tollgatev1.LimiterServiceClient
	stop func()
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newDurableEnv(t *testing.T) *durableEnv {
	return &durableEnv{t: t, dir: t.TempDir(), clock: fakeclock.New(testStart), log: &syncBuffer{}}
}

// start opens the data directory with seed and serves it.
func (d *durableEnv) start(seed []limiter.PoolConfig) {
	d.t.Helper()
	logger := slog.New(slog.NewTextHandler(d.log, nil))
	srv, err := Open(Config{Clock: d.clock, Logger: logger, ShutdownTimeout: 2 * time.Second, Limits: d.limits}, d.dir, seed)
	if err != nil {
		d.t.Fatalf("Open(%s): %v", d.dir, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn := dial(d.t, lis.Addr().String())
	d.srv, d.adm, d.lim = srv, tollgatev1.NewAdminServiceClient(conn), tollgatev1.NewLimiterServiceClient(conn)
	stopped := false
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		conn.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				d.t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLimit):
			d.t.Errorf("Serve did not return after its context ended")
		}
	}
	d.t.Cleanup(d.stop)
}

// restart stops the server and opens the directory again, after the
// clock moved on by downtime.
func (d *durableEnv) restart(downtime time.Duration, seed []limiter.PoolConfig) {
	d.t.Helper()
	d.stop()
	d.clock.Advance(downtime)
	d.start(seed)
}

// createPool creates pool name with a limit of 1 and a 3s default TTL.
func (d *durableEnv) createPool(name string) {
	d.t.Helper()
	if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: 1, DefaultLeaseTtl: dur(3 * time.Second)}}); err != nil {
		d.t.Fatal(err)
	}
}

func (d *durableEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	d.t.Cleanup(cancel)
	return ctx
}

func (d *durableEnv) get(name string) (*tollgatev1.GetPoolResponse, error) {
	return d.adm.GetPool(d.ctx(), &tollgatev1.GetPoolRequest{Name: name})
}

// TestOpenKeepsPoolChanges: acknowledged creates, updates and deletes are
// there after a restart, with their times.
func TestOpenKeepsPoolChanges(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	for _, name := range []string{"a", "b", "c"} {
		if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: name, ConcurrencyLimit: 2, Description: "first"}}); err != nil {
			t.Fatal(err)
		}
	}
	d.clock.Advance(time.Minute)
	_, err := d.adm.UpdatePool(d.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "b", ConcurrencyLimit: 7, Rate: 3, MaxLeaseTtl: dur(time.Minute)},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit", "rate", "max_lease_ttl"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.adm.DeletePool(d.ctx(), &tollgatev1.DeletePoolRequest{Name: "c"}); err != nil {
		t.Fatal(err)
	}

	d.restart(time.Hour, nil)
	resp, err := d.adm.ListPools(d.ctx(), &tollgatev1.ListPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetPools()); n != 2 {
		t.Fatalf("after a restart: %d pools (%v); want a and b", n, resp.GetPools())
	}
	a, b := resp.GetPools()[0], resp.GetPools()[1]
	if a.GetName() != "a" || a.GetConcurrencyLimit() != 2 || a.GetDescription() != "first" || !a.GetCreateTime().AsTime().Equal(testStart) {
		t.Fatalf("pool a after a restart: %v", a)
	}
	if b.GetConcurrencyLimit() != 7 || b.GetRate() != 3 || b.GetBurst() != 3 || b.GetMaxLeaseTtl().AsDuration() != time.Minute ||
		!b.GetUpdateTime().AsTime().Equal(testStart.Add(time.Minute)) || !b.GetCreateTime().AsTime().Equal(testStart) {
		t.Fatalf("pool b after a restart: %v", b)
	}
}

// TestRecreatedPoolContinuesFencingTokens: a pool deleted and created again
// under the same name, even across a restart, issues tokens above every
// token of the deleted pool, so a protected system that keys fencing by
// pool name never sees a token repeat.
func TestRecreatedPoolContinuesFencingTokens(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	create := func() {
		t.Helper()
		if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func() uint64 {
		t.Helper()
		resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLease().GetFencingToken()
	}
	deletePool := func() {
		t.Helper()
		if _, err := d.adm.DeletePool(d.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	create()
	first := acquire()
	deletePool()
	create()
	second := acquire()
	if second <= first {
		t.Fatalf("re-created pool issued token %d after the deleted one issued %d", second, first)
	}
	deletePool()
	d.restart(time.Minute, nil)
	create()
	if third := acquire(); third <= second {
		t.Fatalf("after a restart the re-created pool issued token %d after %d", third, second)
	}
}

// TestStoreFailureChangesNothing: when the store cannot be written, pool
// changes fail with UNAVAILABLE (STORAGE_FAILED) and leave the pool as it was.
func TestStoreFailureChangesNothing(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "a", ConcurrencyLimit: 2}}); err != nil {
		t.Fatal(err)
	}
	d.srv.store.Close() // every write fails from now on

	_, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "b", ConcurrencyLimit: 2}})
	st := wantStatus(t, err, codes.Unavailable, apierr.ReasonStorageFailed)
	if !strings.Contains(st.Message(), "nothing was changed") {
		t.Fatalf("message %q does not say nothing changed", st.Message())
	}
	if _, err := d.get("b"); err == nil {
		t.Fatal("pool b exists after its create failed")
	}
	_, err = d.adm.UpdatePool(d.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool: &tollgatev1.Pool{Name: "a", ConcurrencyLimit: 9}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
	})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonStorageFailed)
	_, err = d.adm.DeletePool(d.ctx(), &tollgatev1.DeletePoolRequest{Name: "a"})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonStorageFailed)
	resp, err := d.get("a")
	if err != nil || resp.GetPool().GetConcurrencyLimit() != 2 {
		t.Fatalf("pool a after failed changes: %v, %v", resp, err)
	}
	// The first grant needs its lease horizon written: it fails too.
	_, err = d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "a"})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonStorageFailed)
	if s := d.status("a"); s.GetHeld() != 0 {
		t.Fatalf("held %d after a failed grant", s.GetHeld())
	}
}

func (d *durableEnv) status(name string) *tollgatev1.PoolStatus {
	d.t.Helper()
	resp, err := d.get(name)
	if err != nil {
		d.t.Fatalf("GetPool(%q): %v", name, err)
	}
	return resp.GetStatus()
}

// TestPoolsFileSeedsOnlyTheFirstStart: the pools file is declared on the
// first start; later, the store wins and a different file is a warning.
func TestPoolsFileSeedsOnlyTheFirstStart(t *testing.T) {
	d := newDurableEnv(t)
	seed := []limiter.PoolConfig{{Name: "a", ConcurrencyLimit: 2}, {Name: "b", Rate: 5}}
	d.start(seed)
	if !strings.Contains(d.log.String(), "first start") {
		t.Fatalf("log does not say the file seeded the store:\n%s", d.log)
	}
	if _, err := d.adm.DeletePool(d.ctx(), &tollgatev1.DeletePoolRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	_, err := d.adm.UpdatePool(d.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool: &tollgatev1.Pool{Name: "a", ConcurrencyLimit: 4}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
	})
	if err != nil {
		t.Fatal(err)
	}

	d.restart(time.Hour, seed)
	if resp, err := d.get("a"); err != nil || resp.GetPool().GetConcurrencyLimit() != 4 {
		t.Fatalf("pool a after a restart with the old file: %v, %v; want the stored limit 4", resp, err)
	}
	if _, err := d.get("b"); err == nil {
		t.Fatal("the deleted pool b came back from the file")
	}
	logs := d.log.String()
	for _, want := range []string{"the store wins", "declared differently in the store: a", "in the file but not in the store (deleted since, or added to the file later): b"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %q:\n%s", want, logs)
		}
	}

	// The same file as the store: no warning.
	d.restart(time.Hour, []limiter.PoolConfig{{Name: "a", ConcurrencyLimit: 4}})
	if n := strings.Count(d.log.String(), "the store wins"); n != 1 {
		t.Fatalf("%d warnings after a restart with a file equal to the store; want only the earlier one", n)
	}
}

// TestRecoveryOverGRPC: after a restart, a pool with leases from before it
// shows recovering_until, refuses no_wait acquires with UNAVAILABLE
// (RECOVERING) and a retry delay, re-adopts renewed leases that carry
// their weight (and refuses those that do not), continues fencing tokens
// above the old ones, and grants normally once the window is over.
func TestRecoveryOverGRPC(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	_, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3, MaxLeaseTtl: dur(10 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*tollgatev1.Lease
	for i := 0; i < 2; i++ {
		resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(int64(1 + i)), Ttl: dur(10 * time.Second), ClientId: "holder", Description: "job"})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, resp.GetLease())
	}

	d.restart(2*time.Second, nil)
	until := testStart.Add(12 * time.Second)
	if got := d.status("db").GetRecoveringUntil(); got == nil || !got.AsTime().Equal(until) {
		t.Fatalf("recovering_until = %v; want %v", got, until)
	}
	_, err = d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
	st := wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)
	if delay, ok := retryDelay(err); !ok || delay != 10*time.Second || !strings.Contains(st.Message(), until.Format(time.RFC3339Nano)) {
		t.Fatalf("RECOVERING error %q with retry delay %v, %v", st.Message(), delay, ok)
	}

	// Lease 0 is renewed with its weight: re-adopted. Lease 1 without: refused.
	l0 := leases[0]
	resp, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l0.GetId(), Ttl: dur(5 * time.Second), Weight: i64(1), ClientId: "holder", Description: "job", Priority: 1, ExpiryReceipt: l0.GetExpiryReceipt()})
	if err != nil {
		t.Fatalf("renew with weight after a restart: %v", err)
	}
	got := resp.GetLease()
	if got.GetId() != l0.GetId() || got.GetFencingToken() != l0.GetFencingToken() || got.GetWeight() != 1 || got.GetClientId() != "holder" || got.GetDescription() != "job" || got.GetPriority() != 1 {
		t.Fatalf("re-adopted lease %v; was %v", got, l0)
	}
	_, err = d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: leases[1].GetId()})
	wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotReadopted)
	_, err = d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: leases[1].GetId(), Weight: i64(0)})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if s := d.status("db"); s.GetHeld() != 1 || s.GetReadopted() != 1 {
		t.Fatalf("after a re-adoption: %v", s)
	}

	// On a Session stream, the session's client id is the default.
	sc := (&env{t: t, lim: d.lim}).session()
	sc.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "sess"}}})
	r := sc.call(&tollgatev1.SessionRequest{RequestId: 2, Kind: &tollgatev1.SessionRequest_Renew{Renew: &tollgatev1.RenewRequest{Pool: "db", LeaseId: leases[1].GetId(), Weight: i64(2), ExpiryReceipt: leases[1].GetExpiryReceipt()}}})
	if l := r.GetRenew().GetLease(); l.GetClientId() != "sess" || l.GetWeight() != 2 {
		t.Fatalf("re-adopted on a session: %v", r)
	}

	d.clock.Advance(10 * time.Second)
	if s := d.status("db"); s.GetRecoveringUntil() != nil {
		t.Fatalf("still recovering after the window: %v", s)
	}
	resp2, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp2.GetLease().GetFencingToken() <= leases[1].GetFencingToken() {
		t.Fatalf("token %d after the restart; %d was issued before", resp2.GetLease().GetFencingToken(), leases[1].GetFencingToken())
	}
}

// TestEndedLeasesAreNotReadopted is issue #10's scenario in its four
// variants: a lease A that ended before a restart (expired, released,
// revoked, or of a pool deleted and created again) and the live holder B
// of its place; after the restart, A's renew is refused with the reason
// it ended and B is re-adopted. A renew whose receipt is not the server's,
// or that has none, is not re-adopted either.
func TestEndedLeasesAreNotReadopted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(d *durableEnv, a *tollgatev1.Lease)
		code   codes.Code
		reason apierr.Reason
		says   string
	}{
		{"expired", func(d *durableEnv, a *tollgatev1.Lease) {
			d.clock.Advance(4 * time.Second)
			_, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: a.GetId()})
			wantStatus(d.t, err, codes.NotFound, apierr.ReasonLeaseExpired)
		}, codes.NotFound, apierr.ReasonLeaseExpired, "expired at"},
		{"released", func(d *durableEnv, a *tollgatev1.Lease) {
			if _, err := d.lim.Release(d.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: a.GetId()}); err != nil {
				d.t.Fatal(err)
			}
		}, codes.NotFound, apierr.ReasonLeaseNotReadopted, "it ended before the restart (it was released or revoked"},
		{"revoked", func(d *durableEnv, a *tollgatev1.Lease) {
			if _, err := d.adm.RevokeLease(d.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: a.GetId(), Reason: "test"}); err != nil {
				d.t.Fatal(err)
			}
		}, codes.NotFound, apierr.ReasonLeaseNotReadopted, "it ended before the restart (it was released or revoked"},
		{"re-created pool", func(d *durableEnv, a *tollgatev1.Lease) {
			if _, err := d.adm.DeletePool(d.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
				d.t.Fatal(err)
			}
			d.createPool("db")
		}, codes.NotFound, apierr.ReasonLeaseNotReadopted, "earlier pool of that name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDurableEnv(t)
			d.start(nil)
			d.createPool("db")
			acquire := func() *tollgatev1.Lease {
				resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(3 * time.Second), ClientId: "c1", NoWait: true})
				if err != nil {
					t.Fatal(err)
				}
				if resp.GetLease().GetExpiryReceipt() == "" {
					t.Fatalf("grant without an expiry receipt: %v", resp.GetLease())
				}
				return resp.GetLease()
			}
			a := acquire()
			tc.end(d, a)
			b := acquire()
			d.restart(time.Second, nil)
			renew := func(l *tollgatev1.Lease, receipt string) (*tollgatev1.RenewResponse, error) {
				return d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId(), Weight: i64(1), ClientId: "c1", ExpiryReceipt: receipt})
			}
			_, err := renew(a, a.GetExpiryReceipt())
			if st := wantStatus(t, err, tc.code, tc.reason); !strings.Contains(st.Message(), tc.says) {
				t.Fatalf("the ended lease's renew says %q; want it to say %q", st.Message(), tc.says)
			}
			_, err = renew(b, "")
			wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotReadopted)
			_, err = renew(b, a.GetExpiryReceipt()) // another lease's receipt is no receipt
			wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotReadopted)
			_, err = renew(b, "junk")
			wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
			resp, err := renew(b, b.GetExpiryReceipt())
			if err != nil || resp.GetLease().GetFencingToken() != b.GetFencingToken() {
				t.Fatalf("the live holder's renew: %v, %v; want it re-adopted", resp, err)
			}
		})
	}
}

// TestOpenErrors: a directory in use, and a bad seed.
func TestOpenErrors(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	if _, err := Open(Config{}, d.dir, nil); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open of a directory in use: %v", err)
	}
	if _, err := Open(Config{}, t.TempDir(), []limiter.PoolConfig{{Name: "x"}}); err == nil || !strings.Contains(err.Error(), "pools file") {
		t.Fatalf("Open with an invalid seed: %v", err)
	}
}

// A lease re-adopted after a restart counts toward its client's lease
// limit, as the grant it was: a client at its limit before the restart is
// still at it once it has renewed.
func TestReadoptedLeasesCountTowardTheClientLimit(t *testing.T) {
	d := newDurableEnv(t)
	d.limits = limits.Limits{MaxClientLeases: 1}
	d.start(nil)
	if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3}}); err != nil {
		t.Fatal(err)
	}
	resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(10 * time.Second), ClientId: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	d.restart(time.Second, nil)
	if _, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: resp.GetLease().GetId(), Weight: i64(1), ClientId: "holder", ExpiryReceipt: resp.GetLease().GetExpiryReceipt()}); err != nil {
		t.Fatalf("re-adoption: %v", err)
	}
	d.clock.Advance(10 * time.Second) // the recovery window ends; the re-adopted lease was renewed to 15s
	if _, err := d.lim.Renew(d.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: resp.GetLease().GetId()}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	_, err = d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true, ClientId: "holder"})
	wantStatus(t, err, codes.ResourceExhausted, ReasonClientLeaseLimit)
}

// TestCleanStopNeedsNoWindow: a server stopped gracefully with every lease
// of a pool released restarts that pool with no recovery window, while a
// pool that still held a lease recovers.
func TestCleanStopNeedsNoWindow(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	d.createPool("free")
	d.createPool("held")
	resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "free", NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.lim.Release(d.ctx(), &tollgatev1.ReleaseRequest{Pool: "free", LeaseId: resp.GetLease().GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "held", NoWait: true}); err != nil {
		t.Fatal(err)
	}
	d.restart(time.Second, nil)
	if got := d.status("free").GetRecoveringUntil(); got != nil {
		t.Fatalf("a pool that held nothing at a clean stop recovers until %v", got.AsTime())
	}
	if got := d.status("held").GetRecoveringUntil(); got == nil {
		t.Fatal("a pool holding a lease at the stop does not recover")
	}
	if _, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "free", NoWait: true}); err != nil {
		t.Fatalf("acquire after a clean stop: %v", err)
	}
}

// After a restart on a data directory, a pool with headroom grants at once
// what its leases from before the restart cannot hold, and holds back the
// rest: a graceful stop (as here) records the weight they held (3) as the
// held-weight bound, in place of the bound written ahead (3 held + 16/8).
func TestRestartGrantsBesideTheHeldBound(t *testing.T) {
	d := newDurableEnv(t)
	d.start([]limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 16, MaxLeaseTTL: time.Minute}})
	if _, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(3), Ttl: dur(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	d.restart(time.Second, nil)
	if _, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(13), NoWait: true}); err != nil {
		t.Fatalf("grant beside the old leases' bound: %v", err)
	}
	_, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonRecovering)
}
