package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestAcquireRenewRelease(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3})

	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(2), Ttl: dur(10 * time.Second), Priority: 3, ClientId: "c1", Description: "job 7"})
	if l.GetPool() != "db" || l.GetWeight() != 2 || l.GetClientId() != "c1" || l.GetDescription() != "job 7" || l.GetPriority() != 3 {
		t.Fatalf("lease = %v", l)
	}
	if !strings.HasPrefix(l.GetId(), strconv.FormatUint(l.GetFencingToken(), 10)+".") || l.GetFencingToken() == 0 {
		t.Fatalf("lease id %q does not match fencing token %d", l.GetId(), l.GetFencingToken())
	}
	if got := l.GetExpireTime().AsTime(); !got.Equal(testStart.Add(10 * time.Second)) {
		t.Fatalf("expire_time = %v, want %v", got, testStart.Add(10*time.Second))
	}
	if !l.GetAcquireTime().AsTime().Equal(testStart) || l.GetTtl().AsDuration() != 10*time.Second {
		t.Fatalf("acquire_time/ttl = %v/%v", l.GetAcquireTime().AsTime(), l.GetTtl().AsDuration())
	}
	// Unset weight means 1; unset ttl means the pool's default (15s).
	l2 := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	if l2.GetWeight() != 1 || l2.GetTtl().AsDuration() != limiter.DefaultLeaseTTL || l2.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("second lease = %v", l2)
	}
	if st := e.status("db"); st.GetHeld() != 3 || st.GetLeases() != 2 || st.GetGranted() != 2 {
		t.Fatalf("status = %v", st)
	}

	e.clock.Advance(5 * time.Second)
	rn, err := e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId(), Ttl: dur(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := rn.GetLease().GetExpireTime().AsTime(); !got.Equal(testStart.Add(25 * time.Second)) {
		t.Fatalf("renewed expire_time = %v", got)
	}
	// Unset ttl keeps the lease's TTL.
	rn, err = e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l.GetId()})
	if err != nil || rn.GetLease().GetTtl().AsDuration() != 20*time.Second {
		t.Fatalf("Renew without ttl = %v, %v", rn, err)
	}

	for _, id := range []string{l.GetId(), l2.GetId()} {
		if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: id}); err != nil {
			t.Fatalf("Release(%s): %v", id, err)
		}
	}
	if st := e.status("db"); st.GetHeld() != 0 || st.GetLeases() != 0 || st.GetReleased() != 2 {
		t.Fatalf("status after release = %v", st)
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	first := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})

	got := make(chan *tollgatev1.AcquireResponse, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
		got <- resp
		errc <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	resp := <-got
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if resp.GetLease().GetFencingToken() <= first.GetFencingToken() {
		t.Fatalf("lease %v after %v", resp.GetLease(), first)
	}
}

func TestAcquireWaitTimeout(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})

	errc := make(chan error, 1)
	go func() {
		_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db", WaitTimeout: dur(2 * time.Second)})
		errc <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	e.clock.Advance(2 * time.Second)
	wantStatus(t, <-errc, codes.DeadlineExceeded, apierr.ReasonWaitTimeout)
	if st := e.status("db"); st.GetWaiting() != 0 || st.GetHeld() != 1 || st.GetWaitTimeouts() != 1 {
		t.Fatalf("status = %v", st)
	}
}

// A caller that cancels its wait leaves nothing behind: no waiter, no
// permit, and the next acquire is granted.
func TestAcquireCancelledLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	first := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "db"})
		errc <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	// The client learns of its cancel before the server does.
	testwait.For(t, "the server to drop the waiter", func() bool { return e.status("db").GetWaiting() == 0 })
	st := e.status("db")
	if st.GetHeld() != 1 || st.GetLeases() != 1 || st.GetCanceled() != 1 || st.GetGranted() != 1 {
		t.Fatalf("status after cancel = %v", st)
	}
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
}

// A call whose deadline passes while waiting gets DEADLINE_EXCEEDED and
// leaves nothing behind.
func TestAcquireDeadline(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "db"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	testwait.For(t, "the server to drop the waiter", func() bool { return e.status("db").GetWaiting() == 0 })
	if st := e.status("db"); st.GetHeld() != 1 {
		t.Fatalf("status = %v", st)
	}
}

func TestAcquireTryMode(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
	_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
	st := wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonNoCapacity)
	if errorInfo(st).GetMetadata()["pool"] != "db" {
		t.Fatalf("ErrorInfo metadata = %v", errorInfo(st).GetMetadata())
	}
	if s := e.status("db"); s.GetWaiting() != 0 || s.GetRejected() != 1 {
		t.Fatalf("status = %v", s)
	}
}

func TestAcquireQueueFull(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 1})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "db"}) //nolint:errcheck // cancelled below
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })
	_, err := e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db"})
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonQueueFull)
}

// Every caller error comes back with the right code and reason, and a
// message for people.
func TestLimiterCallerErrors(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2, MaxLeaseTtl: dur(time.Minute)})
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 10})
	held := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})
	ctx := e.ctx()

	type tc struct {
		name   string
		call   func() error
		code   codes.Code
		reason apierr.Reason
		msg    string // a substring the message must have
	}
	acq := func(r *tollgatev1.AcquireRequest) func() error {
		return func() error { _, err := e.lim.Acquire(ctx, r); return err }
	}
	rel := func(r *tollgatev1.ReleaseRequest) func() error {
		return func() error { _, err := e.lim.Release(ctx, r); return err }
	}
	ren := func(r *tollgatev1.RenewRequest) func() error {
		return func() error { _, err := e.lim.Renew(ctx, r); return err }
	}
	take := func(r *tollgatev1.TakeRequest) func() error {
		return func() error { _, err := e.lim.Take(ctx, r); return err }
	}
	inv, ra := codes.InvalidArgument, apierr.ReasonInvalidArgument
	cases := []tc{
		{"acquire unknown pool", acq(&tollgatev1.AcquireRequest{Pool: "nope"}), codes.NotFound, apierr.ReasonPoolNotFound, "tollgate pool create"},
		{"acquire no pool", acq(&tollgatev1.AcquireRequest{}), inv, ra, "pool is required"},
		{"acquire malformed pool", acq(&tollgatev1.AcquireRequest{Pool: "bad name!"}), inv, ra, "[A-Za-z0-9._:/-]"},
		{"acquire weight 0", acq(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(0)}), inv, ra, "weight"},
		{"acquire weight -1", acq(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(-1)}), inv, ra, "weight"},
		{"acquire weight above limit", acq(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(3)}), inv, ra, "limit"},
		{"acquire weight above burst", acq(&tollgatev1.AcquireRequest{Pool: "api", Weight: i64(11)}), inv, ra, "burst"},
		{"acquire ttl above max", acq(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(2 * time.Minute)}), inv, ra, "ttl"},
		{"acquire ttl below min", acq(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Millisecond)}), inv, ra, "ttl"},
		{"acquire negative ttl", acq(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(-time.Second)}), inv, ra, "ttl"},
		{"acquire negative wait", acq(&tollgatev1.AcquireRequest{Pool: "db", WaitTimeout: dur(-time.Second)}), inv, ra, "wait_timeout"},
		{"acquire malformed duration", acq(&tollgatev1.AcquireRequest{Pool: "db", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}}), inv, ra, "ttl"},
		{"acquire long client id", acq(&tollgatev1.AcquireRequest{Pool: "db", ClientId: strings.Repeat("x", 300)}), inv, ra, "client id"},
		{"release unknown pool", rel(&tollgatev1.ReleaseRequest{Pool: "nope", LeaseId: "1"}), codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"release bad lease id", rel(&tollgatev1.ReleaseRequest{Pool: "db", LeaseId: "abc"}), inv, ra, "lease id"},
		{"release negative lease id", rel(&tollgatev1.ReleaseRequest{Pool: "db", LeaseId: "-1"}), inv, ra, "lease id"},
		{"release no lease id", rel(&tollgatev1.ReleaseRequest{Pool: "db"}), inv, ra, "lease_id is required"},
		{"release never issued", rel(&tollgatev1.ReleaseRequest{Pool: "db", LeaseId: "999"}), codes.NotFound, apierr.ReasonLeaseNotFound, "999"},
		{"renew bad lease id", ren(&tollgatev1.RenewRequest{Pool: "db", LeaseId: "1x"}), inv, ra, "lease id"},
		{"renew with a wrong tag", ren(&tollgatev1.RenewRequest{Pool: "db", LeaseId: tokenOf(held.GetId()) + ".AAAAAAAAAAAAAAAA"}), codes.NotFound, apierr.ReasonLeaseNotFound, "has this id"},
		{"renew by the bare fencing token", ren(&tollgatev1.RenewRequest{Pool: "db", LeaseId: tokenOf(held.GetId())}), codes.NotFound, apierr.ReasonLeaseNotFound, "lacks the tag"},
		{"renew ttl above max", ren(&tollgatev1.RenewRequest{Pool: "db", LeaseId: held.GetId(), Ttl: dur(time.Hour)}), inv, ra, "ttl"},
		{"renew negative ttl", ren(&tollgatev1.RenewRequest{Pool: "db", LeaseId: held.GetId(), Ttl: dur(-time.Second)}), inv, ra, "ttl"},
		{"renew unknown pool", ren(&tollgatev1.RenewRequest{Pool: "nope", LeaseId: "1"}), codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"take unknown pool", take(&tollgatev1.TakeRequest{Pool: "nope"}), codes.NotFound, apierr.ReasonPoolNotFound, "nope"},
		{"take no rate", take(&tollgatev1.TakeRequest{Pool: "db"}), codes.FailedPrecondition, apierr.ReasonNoRateLimit, "rate"},
		{"take 0 tokens", take(&tollgatev1.TakeRequest{Pool: "api", Tokens: i64(0)}), inv, ra, "tokens"},
		{"take above burst", take(&tollgatev1.TakeRequest{Pool: "api", Tokens: i64(11)}), inv, ra, "burst"},
		{"take negative wait", take(&tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(-time.Second)}), inv, ra, "max_wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := wantStatus(t, c.call(), c.code, c.reason)
			if !strings.Contains(st.Message(), c.msg) {
				t.Errorf("message %q does not mention %q", st.Message(), c.msg)
			}
		})
	}
	if s := e.status("db"); s.GetHeld() != 1 || s.GetLeases() != 1 {
		t.Fatalf("errors changed the pool: %v", s)
	}
}

func TestReleaseAndRenewExpiredLease(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})
	l2 := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Second)})
	e.clock.Advance(2 * time.Second)

	_, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()})
	st := wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseExpired)
	md := errorInfo(st).GetMetadata()
	if md["pool"] != "db" || md["lease_id"] != l.GetId() {
		t.Fatalf("ErrorInfo metadata = %v", md)
	}
	_, err = e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: l2.GetId()})
	wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseExpired)
	if s := e.status("db"); s.GetHeld() != 0 || s.GetExpired() != 2 {
		t.Fatalf("status = %v", s)
	}
}

func TestTake(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 1, Burst: 2})

	// The burst is there at once.
	resp, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api", Tokens: i64(2)})
	if err != nil || resp.GetTokens() != 2 || resp.GetWaited().AsDuration() != 0 {
		t.Fatalf("Take(2) = %v, %v", resp, err)
	}
	// With no max_wait and no deadline, tokens must be there at once.
	_, err = e.lim.Take(context.Background(), &tollgatev1.TakeRequest{Pool: "api"})
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited)
	if d, ok := retryDelay(err); !ok || d != time.Second {
		t.Fatalf("RetryInfo = %v, %v; want 1s", d, ok)
	}
	// A wait within max_wait is served when the clock gets there.
	done := make(chan *tollgatev1.TakeResponse, 1)
	errc := make(chan error, 1)
	go func() {
		resp, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(5 * time.Second)})
		done <- resp
		errc <- err
	}()
	testwait.For(t, "the take to reserve", func() bool { return e.status("api").GetTokensAvailable() < 0 })
	e.clock.Advance(time.Second)
	resp = <-done
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if resp.GetTokens() != 1 || resp.GetWaited().AsDuration() != time.Second {
		t.Fatalf("waited Take = %v", resp)
	}
	// Beyond max_wait: RATE_LIMITED, with when to retry.
	_, err = e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(100 * time.Millisecond)})
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited)
	if d, ok := retryDelay(err); !ok || d != time.Second {
		t.Fatalf("RetryInfo = %v, %v; want 1s", d, ok)
	}
	if s := e.status("api"); s.GetTokensGranted() != 3 || s.GetRejected() != 2 {
		t.Fatalf("status = %v", s)
	}
}

// Without max_wait, the call's deadline bounds the wait.
func TestTakeDeadlineBoundsWait(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 1})
	if _, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "api"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := e.lim.Take(ctx, &tollgatev1.TakeRequest{Pool: "api"}) // needs 1s, has < 0.5s
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited)
	// max_wait is capped by the deadline too.
	_, err = e.lim.Take(ctx, &tollgatev1.TakeRequest{Pool: "api", MaxWait: dur(time.Hour)})
	wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonRateLimited)
}
