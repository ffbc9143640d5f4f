package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// RevokeLease ends a lease at once: its session gets LeaseEvent REVOKED
// with the reason, its permits go to a waiter, and a later renew or
// release fails with NOT_FOUND (LEASE_REVOKED) naming the reason.
func TestAdminRevokeLease(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	s.send(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	testwait.For(t, "the acquire to wait", func() bool { return e.status("db").GetWaiting() == 1 })

	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.GetId(), Reason: "shard 3 maintenance"}); err != nil {
		t.Fatal(err)
	}
	var ev *tollgatev1.LeaseEvent
	var granted *tollgatev1.Lease
	for ev == nil || granted == nil {
		r := s.next()
		switch {
		case r.GetEvent() != nil:
			ev = r.GetEvent()
		case r.GetAcquire() != nil:
			granted = r.GetAcquire().GetLease()
		default:
			t.Fatalf("unexpected response %v", r)
		}
	}
	if ev.GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || ev.GetLease().GetId() != l.GetId() ||
		!strings.Contains(ev.GetReason(), "shard 3 maintenance") {
		t.Fatalf("event = %v", ev)
	}
	if st := e.status("db"); st.GetRevoked() != 1 || st.GetHeld() != 1 {
		t.Fatalf("status = %v", st)
	}
	wantSessionError(t, s.call(renewReq(3, "db", l.GetId(), 0)), codes.NotFound, apierr.ReasonLeaseRevoked)
	_, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: l.GetId()})
	if st := wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseRevoked); !strings.Contains(st.Message(), "shard 3 maintenance") {
		t.Fatalf("release message = %q", st.Message())
	}
	_, err = e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.GetId()})
	wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseRevoked)

	found := false
	for _, ev := range e.srv.RecentEvents() {
		if ev.Type == events.LeaseRevoked && ev.LeaseID == tokenOf(l.GetId()) && strings.Contains(ev.Detail, "shard 3 maintenance") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no lease_revoked event with the reason in %+v", e.srv.RecentEvents())
	}
	if granted.GetWeight() != 1 || granted.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("waiter granted %v", granted)
	}
}

func TestAdminRevokeLeaseErrors(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 1})
	l := e.acquire(&tollgatev1.AcquireRequest{Pool: "db"})
	cases := []struct {
		req    *tollgatev1.RevokeLeaseRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{&tollgatev1.RevokeLeaseRequest{Pool: "db"}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: "x1"}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.RevokeLeaseRequest{LeaseId: "1"}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.GetId(), Reason: strings.Repeat("r", 513)}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.RevokeLeaseRequest{Pool: "nope", LeaseId: "1"}, codes.NotFound, apierr.ReasonPoolNotFound},
		{&tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: "999"}, codes.NotFound, apierr.ReasonLeaseNotFound},
	}
	for _, c := range cases {
		_, err := e.adm.RevokeLease(e.ctx(), c.req)
		wantStatus(t, err, c.code, c.reason)
	}
	_, err := e.adm.GetLease(e.ctx(), &tollgatev1.GetLeaseRequest{Pool: "db", LeaseId: "999"})
	wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotFound)
	_, err = e.adm.GetLease(e.ctx(), &tollgatev1.GetLeaseRequest{Pool: "db", LeaseId: "-1"})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	got, err := e.adm.GetLease(e.ctx(), &tollgatev1.GetLeaseRequest{Pool: "db", LeaseId: l.GetId()})
	if err != nil || got.GetLease().GetId() != l.GetId() || got.GetLease().GetWeight() != 1 {
		t.Fatalf("GetLease = %v, %v", got, err)
	}
	for _, req := range []*tollgatev1.ListLeasesRequest{
		{Pool: "db", PageSize: -1},
		{Pool: "db", PageToken: "!!"},
		{Pool: "db", PageToken: "eHl6"}, // "xyz"
		{Pool: "db", ClientId: strings.Repeat("c", limiter.MaxClientIDLen+1)},
		{},
	} {
		_, err := e.adm.ListLeases(e.ctx(), req)
		wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	}
	_, err = e.adm.ListLeases(e.ctx(), &tollgatev1.ListLeasesRequest{Pool: "nope"})
	wantStatus(t, err, codes.NotFound, apierr.ReasonPoolNotFound)
}

func TestAdminListLeasesPages(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10})
	var ids []string
	for i := range 5 {
		c := "even"
		if i%2 == 1 {
			c = "odd"
		}
		ids = append(ids, e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: c}).GetId())
	}
	var got []string
	req := &tollgatev1.ListLeasesRequest{Pool: "db", PageSize: 2}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		resp, err := e.adm.ListLeases(e.ctx(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.GetLeases() {
			got = append(got, l.GetId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("listed %v; want %v", got, ids)
	}
	resp, err := e.adm.ListLeases(e.ctx(), &tollgatev1.ListLeasesRequest{Pool: "db", ClientId: "odd"})
	if err != nil || len(resp.GetLeases()) != 2 || resp.GetLeases()[0].GetId() != ids[1] || resp.GetNextPageToken() != "" {
		t.Fatalf("client odd: %v, %v", resp, err)
	}
}
