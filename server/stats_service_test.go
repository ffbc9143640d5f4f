package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// GetStats over a real connection: one pool by name, every pool a page at
// a time, with counters, wait-time percentiles and utilisation.
func TestGetStats(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "a", ConcurrencyLimit: 2})
	e.createPool(&tollgatev1.Pool{Name: "b", Rate: 5})
	e.createPool(&tollgatev1.Pool{Name: "c", ConcurrencyLimit: 1})
	if _, err := e.lim.Take(e.ctx(), &tollgatev1.TakeRequest{Pool: "b", Tokens: i64(5)}); err != nil { // the full bucket
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "a"})
	held := e.acquire(&tollgatev1.AcquireRequest{Pool: "a"})
	// A waiter granted after 2s by the server's clock.
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "a"})
		got <- err
	}()
	testwait.For(t, "the acquire to wait", func() bool { return e.status("a").GetWaiting() == 1 })
	e.clock.Advance(2 * time.Second)
	if _, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "a", LeaseId: held.GetId()}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	resp, err := e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{Pool: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetStats()) != 1 || resp.GetNextPageToken() != "" {
		t.Fatalf("GetStats(a) = %v", resp)
	}
	st := resp.GetStats()[0]
	wt := st.GetWaitTimes()
	if st.GetPool() != "a" || st.GetConcurrencyLimit() != 2 || st.GetUtilisation() != 1 || st.GetStatus().GetHeld() != 2 ||
		st.GetStatus().GetGranted() != 3 || st.GetStatus().GetReleased() != 1 || st.GetStatus().GetEffectiveConcurrencyLimit() != 2 {
		t.Fatalf("stats of a: %v", st)
	}
	if wt.GetCount() != 3 || wt.GetP50().AsDuration() != 0 || wt.GetP99().AsDuration() != 2*time.Second ||
		wt.GetMax().AsDuration() != 2*time.Second || wt.GetWindow().AsDuration() != limiter.WaitWindow {
		t.Fatalf("wait times of a: %v", wt)
	}

	// Every pool, two at a time.
	var names []string
	token := ""
	for {
		resp, err := e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetStats() {
			names = append(names, s.GetPool())
			// 5 tokens over 2s at 5/s.
			if s.GetPool() == "b" && (s.GetRate() != 5 || s.GetUtilisation() != 0.5 || s.GetRateUtilisation() != 0.5) {
				t.Fatalf("stats of the rate-only pool: %v", s)
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("pools paged through: %v", names)
	}
}

func TestGetStatsErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{Pool: "nope"})
	st := wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
	if !strings.Contains(st.Message(), `"nope"`) {
		t.Errorf("message %q does not name the pool", st.Message())
	}
	_, err = e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{Pool: "bad name"})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{PageToken: "!!"})
	st = wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if !strings.Contains(st.Message(), "page_token") {
		t.Errorf("message %q does not name page_token", st.Message())
	}
	_, err = e.adm.GetStats(e.ctx(), &tollgatev1.GetStatsRequest{PageSize: -1})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}

// An overload mark crossed by waiting acquires reaches WatchEvents as a
// pool_overload event, once.
func TestOverloadEventReachesWatchEvents(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "q", ConcurrencyLimit: 1, OverloadMark: 2, NearFullMark: -1})
	st := e.watch(e.ctx(), &tollgatev1.WatchEventsRequest{Pool: "q"})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "q"})
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	for i := 1; i <= 3; i++ {
		go e.lim.Acquire(ctx, &tollgatev1.AcquireRequest{Pool: "q"}) //nolint:errcheck // cancelled at the end
		testwait.For(t, "the acquire to wait", func() bool { return e.status("q").GetWaiting() == int64(i) })
	}
	ev := recvEvent(t, st)
	if ev.GetType() != events.PoolOverload || ev.GetPool() != "q" || !strings.Contains(ev.GetDetail(), "2 waiting, at or above the overload mark 2") {
		t.Fatalf("event = %v, want pool_overload", ev)
	}
	// The third waiter made no second event: the next one is the pool's
	// update below.
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "q", Description: "x"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}}); err != nil {
		t.Fatal(err)
	}
	if ev := recvEvent(t, st); ev.GetType() != events.PoolUpdated {
		t.Fatalf("event after the third waiter = %v, want pool_updated", ev)
	}
}

// Marks are set on create, changed by update_mask paths, returned as set,
// and validated with messages that name the field.
func TestPoolMarksConfig(t *testing.T) {
	e := newEnv(t)
	p := e.createPool(&tollgatev1.Pool{Name: "m", ConcurrencyLimit: 4, OverloadMark: 9, NearFullMark: -1, LowUtilisationPeriod: dur(time.Minute)})
	if p.GetOverloadMark() != 9 || p.GetNearFullMark() != -1 || p.GetLowUtilisationMark() != 0 || p.GetLowUtilisationPeriod().AsDuration() != time.Minute {
		t.Fatalf("created pool marks: %v", p)
	}
	resp, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "m", NearFullMark: 0.75, LowUtilisationMark: 0.05},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"near_full_mark", "low_utilisation_mark"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.GetPool(); p.GetOverloadMark() != 9 || p.GetNearFullMark() != 0.75 || p.GetLowUtilisationMark() != 0.05 {
		t.Fatalf("updated pool marks: %v", p)
	}
	evs := e.srv.RecentEvents() // newest first
	if len(evs) != 2 || evs[0].Detail != "near_full_mark=0.75 low_utilisation_mark=0.05" ||
		!strings.HasSuffix(evs[1].Detail, "overload_mark=9 near_full_mark=off low_utilisation_period=1m0s") {
		t.Fatalf("events of the marks' changes: %+v", evs)
	}
	_, err = e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "bad", ConcurrencyLimit: 1, NearFullMark: 2}})
	st := wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if !strings.Contains(st.Message(), "near_full_mark") {
		t.Errorf("message %q does not name near_full_mark", st.Message())
	}
	_, err = e.adm.CreatePool(e.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "bad", ConcurrencyLimit: 1, LowUtilisationPeriod: dur(-time.Second)}})
	st = wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	if !strings.Contains(st.Message(), "low_utilisation_period") {
		t.Errorf("message %q does not name low_utilisation_period", st.Message())
	}
}
