package server

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/auth"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// recordingDialer dials TCP and remembers the local address of each
// connection, so that a test knows the peer address the server sees.
type recordingDialer struct {
	mu    sync.Mutex
	local []string
}

func (d *recordingDialer) option() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			d.mu.Lock()
			d.local = append(d.local, c.LocalAddr().String())
			d.mu.Unlock()
		}
		return c, err
	})
}

// only returns the one local address dialed, failing the test unless
// exactly one connection was made.
func (d *recordingDialer) only(t *testing.T) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.local) != 1 {
		t.Fatalf("dialed %d connections (%v), want 1", len(d.local), d.local)
	}
	return d.local[0]
}

// sessionOverOwnConn opens a Session stream on a new connection, says
// hello as clientID, and returns it with its local address.
func (e *env) sessionOverOwnConn(clientID string) (*sessionClient, string) {
	e.t.Helper()
	var d recordingDialer
	conn := dial(e.t, e.addr, d.option())
	e.t.Cleanup(func() { conn.Close() })
	s := e.sessionOn(tollgatev1.NewLimiterServiceClient(conn))
	r := s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: clientID}}})
	if r.GetWelcome().GetClientId() != clientID {
		e.t.Fatalf("hello answered %v", r)
	}
	return s, d.only(e.t)
}

func (e *env) listClients(req *tollgatev1.ListClientsRequest) *tollgatev1.ListClientsResponse {
	e.t.Helper()
	resp, err := e.adm.ListClients(e.ctx(), req)
	if err != nil {
		e.t.Fatalf("ListClients(%v): %v", req, err)
	}
	return resp
}

func TestListClients(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 10})
	e.createPool(&tollgatev1.Pool{Name: "api", ConcurrencyLimit: 10})
	e.createPool(&tollgatev1.Pool{Name: "feed", Rate: 100})
	connected := e.clock.Now()

	a, addrA := e.sessionOverOwnConn("alpha")
	b, addrB := e.sessionOverOwnConn("beta")
	for i, r := range []*tollgatev1.AcquireRequest{
		{Pool: "db", Weight: i64(2)}, {Pool: "db"}, {Pool: "api"},
	} {
		if a.call(acquireReq(uint64(10+i), r)).GetAcquire().GetLease() == nil {
			t.Fatalf("acquire %v was not granted", r)
		}
	}
	if b.call(acquireReq(10, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(3)})).GetAcquire().GetLease() == nil {
		t.Fatal("b's acquire was not granted")
	}
	share := b.call(&tollgatev1.SessionRequest{RequestId: 11, Kind: &tollgatev1.SessionRequest_AcquireShare{AcquireShare: &tollgatev1.AcquireShareRequest{Pool: "feed", Want: 40}}}).GetAcquireShare().GetShare()
	if share.GetRate() != 40 {
		t.Fatalf("share = %v, want rate 40", share)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "unary-job", Weight: i64(4)}) // no session

	// b's last request is later than a's.
	e.clock.Advance(time.Second)
	active := e.clock.Now()
	if b.call(renewReq(12, "db", "", 0)).GetError() == nil {
		t.Fatal("a renew without a lease id was not refused") // any request counts as activity
	}

	want := []*tollgatev1.ClientSession{
		{ClientId: "alpha", PeerAddress: addrA, Leases: 3, Weight: 4, Pools: []*tollgatev1.ClientPoolHoldings{
			{Pool: "api", Leases: 1, Weight: 1}, {Pool: "db", Leases: 2, Weight: 3},
		}},
		{ClientId: "beta", PeerAddress: addrB, Leases: 1, Weight: 3, Shares: 1, ShareRate: 40, Pools: []*tollgatev1.ClientPoolHoldings{
			{Pool: "db", Leases: 1, Weight: 3}, {Pool: "feed", Shares: 1, ShareRate: 40},
		}},
	}
	resp := e.listClients(&tollgatev1.ListClientsRequest{})
	if len(resp.GetClients()) != 2 || resp.GetNextPageToken() != "" || resp.GetUnattachedLeases() != 1 || resp.GetUnattachedWeight() != 4 {
		t.Fatalf("ListClients = %v", resp)
	}
	got := resp.GetClients()
	if first, _ := strconv.ParseUint(got[0].GetSessionId(), 10, 64); first == 0 || strconv.FormatUint(first+1, 10) != got[1].GetSessionId() {
		t.Errorf("session ids %q, %q are not in connection order", got[0].GetSessionId(), got[1].GetSessionId())
	}
	if !got[0].GetLastActivityTime().AsTime().Equal(connected) || !got[1].GetLastActivityTime().AsTime().Equal(active) {
		t.Errorf("last activity times %v, %v; want %v and %v", got[0].GetLastActivityTime().AsTime(), got[1].GetLastActivityTime().AsTime(), connected, active)
	}
	for i, c := range got {
		if !c.GetConnectTime().AsTime().Equal(connected) || c.GetIdentity() != "" {
			t.Errorf("client %d: connect time %v, identity %q; want %v and none", i, c.GetConnectTime().AsTime(), c.GetIdentity(), connected)
		}
		c = proto.Clone(c).(*tollgatev1.ClientSession)
		c.SessionId, c.ConnectTime, c.LastActivityTime = "", nil, nil
		if !proto.Equal(c, want[i]) {
			t.Errorf("client %d =\n  %v\nwant\n  %v", i, c, want[i])
		}
	}
	idA, idB := got[0].GetSessionId(), got[1].GetSessionId()

	// Filters.
	resp = e.listClients(&tollgatev1.ListClientsRequest{Pool: "api"})
	if len(resp.GetClients()) != 1 || resp.GetClients()[0].GetSessionId() != idA || resp.GetClients()[0].GetWeight() != 1 ||
		len(resp.GetClients()[0].GetPools()) != 1 || resp.GetUnattachedLeases() != 0 {
		t.Errorf("ListClients(pool api) = %v; want alpha alone, with its api lease only", resp)
	}
	resp = e.listClients(&tollgatev1.ListClientsRequest{Pool: "feed"})
	if len(resp.GetClients()) != 1 || resp.GetClients()[0].GetSessionId() != idB {
		t.Errorf("ListClients(pool feed) = %v; want beta, the share holder", resp)
	}
	resp = e.listClients(&tollgatev1.ListClientsRequest{ClientId: "beta"})
	if len(resp.GetClients()) != 1 || resp.GetClients()[0].GetSessionId() != idB || resp.GetUnattachedLeases() != 0 {
		t.Errorf("ListClients(client beta) = %v", resp)
	}
	resp = e.listClients(&tollgatev1.ListClientsRequest{ClientId: "unary-job"})
	if len(resp.GetClients()) != 0 || resp.GetUnattachedLeases() != 1 || resp.GetUnattachedWeight() != 4 {
		t.Errorf("ListClients(client unary-job) = %v; want no session and its unattached lease", resp)
	}

	// Paging.
	page1 := e.listClients(&tollgatev1.ListClientsRequest{PageSize: 1})
	if len(page1.GetClients()) != 1 || page1.GetClients()[0].GetSessionId() != idA || page1.GetNextPageToken() == "" {
		t.Fatalf("page 1 = %v", page1)
	}
	page2 := e.listClients(&tollgatev1.ListClientsRequest{PageSize: 1, PageToken: page1.GetNextPageToken()})
	if len(page2.GetClients()) != 1 || page2.GetClients()[0].GetSessionId() != idB || page2.GetNextPageToken() != "" {
		t.Fatalf("page 2 = %v", page2)
	}

	// Bad requests.
	for _, c := range []struct {
		req    *tollgatev1.ListClientsRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{&tollgatev1.ListClientsRequest{PageToken: "not a token!"}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ListClientsRequest{PageToken: "eHl6"}, codes.InvalidArgument, apierr.ReasonInvalidArgument}, // base64url of "xyz"
		{&tollgatev1.ListClientsRequest{PageSize: -1}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ListClientsRequest{Pool: "bad name"}, codes.InvalidArgument, apierr.ReasonInvalidArgument},
		{&tollgatev1.ListClientsRequest{Pool: "nope"}, codes.NotFound, apierr.ReasonPoolNotFound},
	} {
		_, err := e.adm.ListClients(e.ctx(), c.req)
		wantStatus(t, err, c.code, c.reason)
	}

	// A session that ends leaves the list; its leases stay, unattached.
	if err := a.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := a.wantEnd(); err != io.EOF {
		t.Fatalf("the stream ended with %v, want OK", err)
	}
	resp = e.listClients(&tollgatev1.ListClientsRequest{})
	if len(resp.GetClients()) != 1 || resp.GetClients()[0].GetSessionId() != idB || resp.GetUnattachedLeases() != 4 || resp.GetUnattachedWeight() != 8 {
		t.Fatalf("after alpha's session ended, ListClients = %v; want beta, and alpha's 3 leases unattached", resp)
	}
}

// A session opened with credentials shows who it proved to be; ListClients
// needs an admin.
func TestListClientsIdentity(t *testing.T) {
	const tok = "admin-token-0123456789"
	o := startOps(t, Config{Auth: &auth.Config{AdminToken: tok}}, nil)
	admin, anon := o.env(withToken(tok)), o.env()
	for _, c := range []struct {
		e        *env
		clientID string
	}{{admin, "ops"}, {anon, "anon"}} {
		s := c.e.session()
		s.call(&tollgatev1.SessionRequest{RequestId: 1, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: c.clientID}}})
	}
	resp := admin.listClients(&tollgatev1.ListClientsRequest{})
	if len(resp.GetClients()) != 2 || resp.GetClients()[0].GetIdentity() != auth.TokenPrincipal || resp.GetClients()[1].GetIdentity() != "" {
		t.Fatalf("ListClients = %v; want ops as %q and anon with no identity", resp, auth.TokenPrincipal)
	}
	_, err := anon.adm.ListClients(anon.ctx(), &tollgatev1.ListClientsRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.PermissionDenied && st.Code() != codes.Unauthenticated {
		t.Fatalf("ListClients without credentials: %v; want it refused", err)
	}
}
