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
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func wireRes(ids ...string) []*tollgatev1.Resource {
	out := make([]*tollgatev1.Resource, len(ids))
	for i, id := range ids {
		out[i] = &tollgatev1.Resource{Id: id, Attributes: map[string]string{"addr": id + ".db:5432"}}
	}
	return out
}

// An active pool over the wire: instances declared by AdminService come
// back bound to leases with their attributes; removing a held one revokes
// its lease on the holder's session with the reason; every step is an
// event; bad calls get clear statuses.
func TestActivePoolOverTheWire(t *testing.T) {
	e := newEnv(t)
	p := e.createPool(&tollgatev1.Pool{Name: "db", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE, SelectionPolicy: tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD})
	if p.GetResourceKind() != tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE || p.GetSelectionPolicy() != tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD {
		t.Fatalf("created %v", p)
	}
	up, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", SelectionPolicy: tollgatev1.SelectionPolicy_SELECTION_POLICY_REUSE},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"selection_policy"}}})
	if err != nil || up.GetPool().GetSelectionPolicy() != tollgatev1.SelectionPolicy_SELECTION_POLICY_REUSE {
		t.Fatalf("UpdatePool(selection_policy) = %v, %v", up, err)
	}
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db", SelectionPolicy: tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"selection_policy"}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db", Resources: wireRes("conn-1", "conn-2")})
	if err != nil || resp.GetStatus().GetResources() != 2 || resp.GetStatus().GetResourcesFree() != 2 {
		t.Fatalf("AddResources = %v, %v", resp, err)
	}
	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	if len(l.GetResources()) != 1 || l.GetResources()[0].GetAttributes()["addr"] != l.GetResources()[0].GetId()+".db:5432" {
		t.Fatalf("lease %v", l)
	}
	held := l.GetResources()[0].GetId()

	list, err := e.adm.ListResources(e.ctx(), &tollgatev1.ListResourcesRequest{Pool: "db"})
	if err != nil || len(list.GetResources()) != 2 {
		t.Fatalf("ListResources = %v, %v", list, err)
	}
	for _, r := range list.GetResources() {
		if (r.GetResource().GetId() == held) != (r.GetLeaseId() == l.GetId()) {
			t.Fatalf("ListResources shows %v; lease %s holds %s", list, l.GetId(), held)
		}
	}

	rm, err := e.adm.RemoveResources(e.ctx(), &tollgatev1.RemoveResourcesRequest{Pool: "db", Ids: []string{held}, Reason: "replica rebuilt"})
	if err != nil || rm.GetRemoved() != 1 || rm.GetRevoked() != 1 {
		t.Fatalf("RemoveResources = %v, %v", rm, err)
	}
	ev := s.next().GetEvent()
	if ev.GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || !strings.Contains(ev.GetReason(), "replica rebuilt") || !strings.Contains(ev.GetReason(), held) {
		t.Fatalf("holder told %v", ev)
	}
	var added, removed bool
	for _, ev := range e.srv.RecentEvents() {
		added = added || (ev.Type == events.ResourcesAdded && len(ev.ResourceIDs) == 2 && ev.Actor != "")
		removed = removed || (ev.Type == events.ResourcesRemoved && strings.Contains(ev.Detail, "1 leases revoked"))
	}
	if !added || !removed {
		t.Fatalf("events %+v", e.srv.RecentEvents())
	}

	for _, c := range []struct {
		call   func() error
		code   codes.Code
		reason apierr.Reason
	}{
		{func() error {
			_, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db", Resources: wireRes("conn-2")})
			return err
		}, codes.AlreadyExists, apierr.ReasonResourceExists},
		{func() error {
			_, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db", Resources: wireRes("bad id")})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{func() error {
			_, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "db"})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{func() error {
			_, err := e.adm.RemoveResources(e.ctx(), &tollgatev1.RemoveResourcesRequest{Pool: "db", Ids: []string{"nope"}})
			return err
		}, codes.NotFound, apierr.ReasonResourceNotFound},
		{func() error {
			_, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "nope", Resources: wireRes("x")})
			return err
		}, codes.NotFound, apierr.ReasonPoolNotFound},
		{func() error {
			_, err := e.adm.ListResources(e.ctx(), &tollgatev1.ListResourcesRequest{Pool: "free"})
			return err
		}, codes.FailedPrecondition, apierr.ReasonNotResourcePool},
		{func() error {
			_, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{Pool: &tollgatev1.Pool{Name: "db"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"resource_kind"}}})
			return err
		}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
	} {
		if c.reason == apierr.ReasonNotResourcePool {
			e.createPool(&tollgatev1.Pool{Name: "free", ConcurrencyLimit: 1})
		}
		wantStatus(t, c.call(), c.code, c.reason)
	}
}

// A passive pool over the wire: a provider's stream offers instances, a
// client is granted one; when the provider stops keeping alive, the
// server expires it: its stream ends with DEADLINE_EXCEEDED, the holder's
// session is told its lease was revoked, and the instances are gone.
func TestPassivePoolProviderExpires(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE})
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	ps, err := e.lim.Provide(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&tollgatev1.ProvideRequest{RequestId: 1, Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{
		Pool: "gpu", ProviderId: "worker-1", Ttl: dur(5 * time.Second), Resources: wireRes("slot-1")}}}); err != nil {
		t.Fatal(err)
	}
	r, err := ps.Recv()
	if err != nil || r.GetRequestId() != 1 || r.GetProvider().GetResources() != 1 || !strings.HasPrefix(r.GetProvider().GetAddress(), "127.0.0.1:") {
		t.Fatalf("registered: %v, %v", r, err)
	}
	// A bad offer is answered and the stream goes on.
	if err := ps.Send(&tollgatev1.ProvideRequest{RequestId: 2, Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: wireRes("slot-1")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err = ps.Recv(); err != nil || r.GetRequestId() != 2 || r.GetError().GetReason() != string(apierr.ReasonResourceExists) || r.GetError().GetCode() != int32(codes.AlreadyExists) {
		t.Fatalf("duplicate offer answered %v, %v", r, err)
	}
	if err := ps.Send(&tollgatev1.ProvideRequest{RequestId: 3, Kind: &tollgatev1.ProvideRequest_Offer{Offer: &tollgatev1.ProvideOffer{Resources: wireRes("slot-2")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err = ps.Recv(); err != nil || r.GetError() != nil || r.GetProvider().GetResources() != 2 {
		t.Fatalf("offer answered %v, %v", r, err)
	}
	// A second provider of the same id is refused.
	dup, err := e.lim.Provide(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = dup.Send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "gpu", ProviderId: "worker-1"}}})
	_, err = dup.Recv()
	wantStatus(t, err, codes.AlreadyExists, apierr.ReasonProviderExists)

	s := e.session()
	l := s.call(acquireReq(1, &tollgatev1.AcquireRequest{Pool: "gpu", Weight: i64(2), Ttl: dur(time.Minute)})).GetAcquire().GetLease()
	if len(l.GetResources()) != 2 || l.GetResources()[0].GetProviderId() != "worker-1" {
		t.Fatalf("lease %v", l)
	}

	e.clock.Advance(5 * time.Second) // nothing heard from worker-1 for its TTL
	_, err = ps.Recv()
	wantStatus(t, err, codes.DeadlineExceeded, ReasonProviderExpired)
	ev := s.next().GetEvent()
	if ev.GetType() != tollgatev1.LeaseEventType_LEASE_EVENT_TYPE_REVOKED || !strings.Contains(ev.GetReason(), `with its provider "worker-1"`) {
		t.Fatalf("holder told %v", ev)
	}
	if st := e.status("gpu"); st.GetResources() != 0 || st.GetProviders() != 0 || st.GetHeld() != 0 {
		t.Fatalf("status after expiry %v", st)
	}
	var joined, left bool
	for _, ev := range e.srv.RecentEvents() {
		joined = joined || (ev.Type == events.ProviderJoined && ev.ProviderID == "worker-1")
		left = left || (ev.Type == events.ProviderLeft && ev.ProviderID == "worker-1" && strings.Contains(ev.Detail, "keep-alive"))
	}
	if !joined || !left {
		t.Fatalf("events %+v", e.srv.RecentEvents())
	}
}

// A provider whose stream closes leaves at once, and a stream that does
// not begin with register is refused.
func TestProvideStreamEnds(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE})
	e.createPool(&tollgatev1.Pool{Name: "free", ConcurrencyLimit: 1})
	open := func(first *tollgatev1.ProvideRequest) (tollgatev1.LimiterService_ProvideClient, error) {
		ps, err := e.lim.Provide(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Send(first); err != nil {
			t.Fatal(err)
		}
		_, err = ps.Recv()
		return ps, err
	}
	_, err := open(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_KeepAlive{KeepAlive: &tollgatev1.ProvideKeepAlive{}}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)
	_, err = open(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "free", ProviderId: "w"}}})
	wantStatus(t, err, codes.FailedPrecondition, apierr.ReasonNotPassive)
	_, err = open(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "gpu", ProviderId: "w", Ttl: dur(time.Hour)}}})
	wantStatus(t, err, codes.InvalidArgument, apierr.ReasonInvalidArgument)

	ps, err := open(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "gpu", ProviderId: "w", Resources: wireRes("a")}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.status("gpu"); st.GetResources() != 1 {
		t.Fatalf("status %v", st)
	}
	if err := ps.CloseSend(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the provider to leave", func() bool { return e.status("gpu").GetProviders() == 0 })
	if st := e.status("gpu"); st.GetResources() != 0 {
		t.Fatalf("status %v", st)
	}
}

// A server shutting down ends Provide streams with UNAVAILABLE without
// taking the providers' instances away: the leases on them are not
// revoked (a restarted server re-adopts them).
func TestProvideStreamOnShutdown(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "gpu", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_PASSIVE})
	ps, err := e.lim.Provide(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&tollgatev1.ProvideRequest{Kind: &tollgatev1.ProvideRequest_Register{Register: &tollgatev1.ProvideRegister{Pool: "gpu", ProviderId: "w", Resources: wireRes("a")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Recv(); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "gpu", Ttl: dur(time.Minute)})
	e.stop()
	_, err = ps.Recv()
	wantStatus(t, err, codes.Unavailable, apierr.ReasonShuttingDown)
	for _, ev := range e.srv.RecentEvents() {
		if ev.Type == events.LeaseRevoked || ev.Type == events.ProviderLeft {
			t.Fatalf("shutdown revoked or removed: %+v", ev)
		}
	}
}
