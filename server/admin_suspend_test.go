package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func TestAdminSuspendResumeDrain(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()

	resp, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db"})
	if err != nil || !resp.GetStatus().GetSuspended() || resp.GetStatus().GetHeld() != 1 {
		t.Fatalf("SuspendPool = %v, %v", resp, err)
	}
	_, err = e.lim.Acquire(e.ctx(), &tollgatev1.AcquireRequest{Pool: "db", NoWait: true})
	if st := wantStatus(t, err, codes.ResourceExhausted, apierr.ReasonNoCapacity); !strings.Contains(st.Message(), "suspended") {
		t.Fatalf("message %q", st.Message())
	}
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })

	// Drain with a deadline while the lease is held: DEADLINE_EXCEEDED.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = e.adm.DrainPool(ctx, &tollgatev1.DrainPoolRequest{Name: "db"})
	cancel()
	if st := wantStatus(t, err, codes.DeadlineExceeded, apierr.ReasonWaitTimeout); !strings.Contains(st.Message(), "holds 1 permits in 1 leases") {
		t.Fatalf("drain message %q", st.Message())
	}

	// Drain returns once the lease is released.
	done := make(chan error, 1)
	go func() {
		_, err := e.adm.DrainPool(e.ctx(), &tollgatev1.DrainPoolRequest{Name: "db"})
		done <- err
	}()
	if r := s.call(releaseReq(3, "db", l.GetId())); r.GetRelease() == nil {
		t.Fatalf("release = %v", r)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("drain did not return")
	}

	// Resume grants the waiter.
	rr, err := e.adm.ResumePool(e.ctx(), &tollgatev1.ResumePoolRequest{Name: "db"})
	if err != nil || rr.GetStatus().GetSuspended() {
		t.Fatalf("ResumePool = %v, %v", rr, err)
	}
	if r := s.next(); r.GetAcquire().GetLease() == nil {
		t.Fatalf("waiter after resume: %v", r)
	}

	// Suspend revoking the held: the holder is told.
	if _, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db", RevokeHeld: true}); err != nil {
		t.Fatal(err)
	}
	ev := s.next().GetEvent()
	if ev.GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || !strings.Contains(ev.GetReason(), "suspended") {
		t.Fatalf("event = %v", ev)
	}
	if st := e.status("db"); st.GetHeld() != 0 || !st.GetSuspended() {
		t.Fatalf("status = %v", st)
	}

	for _, err := range []error{
		func() error {
			_, err := e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{Name: "nope"})
			return err
		}(),
		func() error {
			_, err := e.adm.ResumePool(e.ctx(), &tollgatev1.ResumePoolRequest{Name: "nope"})
			return err
		}(),
		func() error {
			_, err := e.adm.DrainPool(e.ctx(), &tollgatev1.DrainPoolRequest{Name: "nope"})
			return err
		}(),
	} {
		wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
	}
	_, err = e.adm.SuspendPool(e.ctx(), &tollgatev1.SuspendPoolRequest{})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
}

// A suspended pool stays suspended across a restart.
func TestSuspendSurvivesServerRestart(t *testing.T) {
	d := newDurableEnv(t)
	d.start(nil)
	if _, err := d.adm.CreatePool(d.ctx(), &tollgatev1.CreatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.adm.SuspendPool(d.ctx(), &tollgatev1.SuspendPoolRequest{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	d.restart(time.Hour, nil)
	resp, err := d.get("db")
	if err != nil || !resp.GetStatus().GetSuspended() {
		t.Fatalf("after restart: %v, %v", resp, err)
	}
	if _, err := d.adm.ResumePool(d.ctx(), &tollgatev1.ResumePoolRequest{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	d.restart(time.Hour, nil)
	if resp, err := d.get("db"); err != nil || resp.GetStatus().GetSuspended() {
		t.Fatalf("after resume and restart: %v, %v", resp, err)
	}
}
