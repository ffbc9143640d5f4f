package server

import (
	"context"
	"sort"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/internal/apiconv"
	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/session"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// AdminService.ListClients: the connected client sessions (as
// session.Streams keeps them) and what each holds (the engine's Holdings,
// summed per session).

// ListClients returns a page of the open Session streams in session id
// order, each with the leases and rate shares it owns. The page token is
// the base64url encoding of the decimal id of the last session of the
// previous page. Each call walks every live lease and share of the pools
// it covers once (limiter.Engine.Holdings) and the open sessions.
func (a *adminService) ListClients(ctx context.Context, req *tollgatev1.ListClientsRequest) (*tollgatev1.ListClientsResponse, error) {
	resp, err := a.listClients(ctx, req)
	if err != nil {
		return nil, refuse.ToStatus(a.srv.log, "ListClients", err, refuse.About{Pool: req.GetPool()})
	}
	return resp, nil
}

func (a *adminService) listClients(ctx context.Context, req *tollgatev1.ListClientsRequest) (*tollgatev1.ListClientsResponse, error) {
	pool, clientID := req.GetPool(), req.GetClientId()
	if pool != "" {
		if err := apiconv.CheckPoolName("pool", pool); err != nil {
			return nil, err
		}
	}
	if n := len(clientID); n > limiter.MaxClientIDLen {
		return nil, refuse.InvalidArg("client_id is %d bytes; the most is %d", n, limiter.MaxClientIDLen)
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, err := pagetoken.Number(req.GetPageToken(), "ListClients")
	if err != nil {
		return nil, err
	}
	holdings, err := a.srv.holdings(ctx, pool)
	if err != nil {
		return nil, err
	}
	open := a.srv.sessions.Clients()
	held := make(map[any]*tollgatev1.ClientSession, len(open))
	for _, c := range open {
		held[c.Owner] = &tollgatev1.ClientSession{}
	}
	resp := &tollgatev1.ListClientsResponse{}
	for _, h := range holdings {
		cs := held[h.Owner]
		if cs == nil { // no owner, or its session has ended
			if clientID == "" || h.ClientID == clientID {
				resp.UnattachedLeases += h.Leases
				resp.UnattachedWeight += h.Weight
			}
			continue
		}
		addHolding(cs, h)
	}
	for _, c := range open {
		if c.ID <= after || (clientID != "" && c.ClientID != clientID) {
			continue
		}
		cs := held[c.Owner]
		if pool != "" && cs.GetLeases() == 0 && cs.GetShares() == 0 {
			continue
		}
		if len(resp.Clients) == size {
			last := resp.Clients[size-1].GetSessionId()
			resp.NextPageToken = pagetoken.Encode(last)
			break
		}
		fillSession(cs, c)
		resp.Clients = append(resp.Clients, cs)
	}
	return resp, nil
}

// addHolding adds h to the totals of cs and to its entry for h's pool.
// Holdings come in pool order, so a pool's entry, if any, is the last.
func addHolding(cs *tollgatev1.ClientSession, h limiter.Holding) {
	cs.Leases += h.Leases
	cs.Weight += h.Weight
	cs.Shares += h.Shares
	cs.ShareRate += h.ShareRate
	n := len(cs.Pools)
	if n == 0 || cs.Pools[n-1].GetPool() != h.Pool {
		cs.Pools = append(cs.Pools, &tollgatev1.ClientPoolHoldings{Pool: h.Pool})
		n++
	}
	p := cs.Pools[n-1]
	p.Leases += h.Leases
	p.Weight += h.Weight
	p.Shares += h.Shares
	p.ShareRate += h.ShareRate
}

// fillSession sets the fields of cs that describe the session itself.
func fillSession(cs *tollgatev1.ClientSession, c session.Client) {
	cs.SessionId = strconv.FormatUint(c.ID, 10)
	cs.ClientId = c.ClientID
	cs.PeerAddress = c.PeerAddr
	cs.Identity = c.Identity
	cs.ConnectTime = timestamppb.New(c.ConnectTime)
	cs.LastActivityTime = timestamppb.New(c.LastActive)
}

// holdings are the holdings of pool (its term's), or, for "", of every
// pool of the shards this server leads (their terms'), in pool order.
func (s *Server) holdings(ctx context.Context, pool string) ([]limiter.Holding, error) {
	if pool != "" {
		return s.termOf(ctx).Engine().Holdings(pool)
	}
	ts := s.localTerms(ctx)
	if len(ts) == 1 {
		return ts[0].Engine().Holdings("")
	}
	var all []limiter.Holding
	for _, t := range ts {
		h, err := t.Engine().Holdings("")
		if err != nil {
			return nil, err
		}
		all = append(all, h...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Pool < all[j].Pool })
	return all, nil
}
