package limiter

import (
	"sort"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// This file is the view of who holds what: the live leases and rate shares
// of pools, summed per Owner, for operators listing connected clients.

// Holding is what one Owner holds in one pool under one client id: see
// Engine.Holdings.
type Holding struct {
	// Pool is the pool's name.
	Pool string
	// Owner is the leases' and shares' Owner (the last non-nil one given
	// to Acquire or Renew, AcquireShare or RefreshShare); nil for those
	// acquired without one.
	Owner any
	// ClientID is the client id the leases and shares were acquired with.
	ClientID string
	// Leases is the number of live leases, and Weight the permit weight
	// they hold.
	Leases, Weight int64
	// Shares is the number of live rate shares, and ShareRate the rate
	// granted to them in all, in tokens per second.
	Shares    int64
	ShareRate float64
}

// holdingKey groups leases and shares into Holdings.
type holdingKey struct {
	owner    any
	clientID string
}

// Holdings sums the live leases and rate shares of pool poolName (of
// every pool, when poolName is "") per Owner and client id, and returns the sums in pool
// name order (in no particular order within a pool). Leases from before a
// restart that were not re-adopted are not counted.
//
// Cost: it visits every live lease and share of the pools it reads, each
// pool under its lock in turn (so the sums of different pools are not of
// one instant), and allocates one Holding per owner, client id and pool.
// Owners must be comparable (the server's are pointers).
//
// Errors: apierr.ErrPoolNotFound (poolName is set and names no pool);
// apierr.ErrShuttingDown.
func (e *Engine) Holdings(poolName string) ([]Holding, error) {
	var ps []*pool
	if poolName != "" {
		p, err := e.lookup(poolName)
		if err != nil {
			return nil, err
		}
		ps = []*pool{p}
	} else {
		if e.closed.Load() {
			return nil, errorf(apierr.ErrShuttingDown, "the server is shutting down")
		}
		ps = e.pools.snapshot()
		sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	}
	var out []Holding
	for _, p := range ps {
		p.mu.Lock()
		if p.deleted {
			p.unlock()
			if poolName != "" {
				return nil, poolNotFound(poolName)
			}
			continue
		}
		out = appendHoldings(out, p.name, p.leases, p.shr.list)
		p.unlock()
	}
	return out, nil
}

// appendHoldings appends to out the holdings of pool, whose live leases
// are leases and rate shares shares.
func appendHoldings(out []Holding, pool string, leases map[uint64]*lease, shares []*share) []Holding {
	at := make(map[holdingKey]int) // index in out
	get := func(owner any, clientID string) *Holding {
		k := holdingKey{owner, clientID}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Holding{Pool: pool, Owner: owner, ClientID: clientID})
		}
		return &out[i]
	}
	for _, l := range leases {
		h := get(l.owner, l.ClientID)
		h.Leases++
		h.Weight += l.Weight
	}
	for _, s := range shares {
		h := get(s.owner, s.clientID)
		h.Shares++
		h.ShareRate += fromShareUnits(s.granted)
	}
	return out
}
