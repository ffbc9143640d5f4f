package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/fanout"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
)

// Paging of /api/pools.
const (
	poolsDefaultLimit = 500
	poolsMaxLimit     = 10_000
)

// PoolsResponse is the JSON of GET /api/pools[?after=NAME&limit=N]:
// pools in name order after NAME, at most N (default 500, at most 10,000).
type PoolsResponse struct {
	// Time is the server's time of the snapshot.
	Time time.Time `json:"time"`
	// Serving is false once shutdown has started.
	Serving bool `json:"serving"`
	// Total is the number of pools on the server; More says that pools
	// follow the last one returned.
	Total int    `json:"total"`
	More  bool   `json:"more"`
	Pools []Pool `json:"pools"`
	// Unreachable names the servers of the cluster whose pools are
	// missing: they did not answer within the fan-out timeout.
	Unreachable []string `json:"unreachable,omitempty"`
}

// Pool is one pool. Effective carries the limits in force when adaptive
// control has lowered them below Configured (it is absent otherwise);
// clients should display effective when present and configured otherwise.
type Pool struct {
	Name string `json:"name"`
	// Owner is the advertised address of the server that leads the pool's
	// shard (on a server of a cluster; absent on a standalone server).
	Owner       string `json:"owner,omitempty"`
	Description string `json:"description,omitempty"`
	// ResourceKind is "active" or "passive" for a pool of instances;
	// absent for a free pool.
	ResourceKind string     `json:"resource_kind,omitempty"`
	Configured   Limits     `json:"configured"`
	Effective    *Limits    `json:"effective,omitempty"`
	Status       PoolStatus `json:"status"`
	CreateTime   time.Time  `json:"create_time"`
	UpdateTime   time.Time  `json:"update_time"`
}

// Limits are a pool's limits; 0 means the pool has no such limit.
type Limits struct {
	ConcurrencyLimit int64   `json:"concurrency_limit"`
	Rate             float64 `json:"rate"`
	Burst            int64   `json:"burst"`
	MaxWaiters       int64   `json:"max_waiters"`
	DefaultLeaseTTL  string  `json:"default_lease_ttl"`
	MaxLeaseTTL      string  `json:"max_lease_ttl"`
}

// PoolStatus mirrors limiter.PoolStatus.
type PoolStatus struct {
	Held            int64   `json:"held"`
	Leases          int64   `json:"leases"`
	Waiting         int64   `json:"waiting"`
	WaitingWeight   int64   `json:"waiting_weight"`
	Granted         int64   `json:"granted"`
	Released        int64   `json:"released"`
	Expired         int64   `json:"expired"`
	Rejected        int64   `json:"rejected"`
	WaitTimeouts    int64   `json:"wait_timeouts"`
	Canceled        int64   `json:"canceled"`
	TokensGranted   int64   `json:"tokens_granted"`
	TokensAvailable float64 `json:"tokens_available"`
	// RecoveringUntil is set while the pool is in its recovery window
	// after a restart (until then, new grants come only from the capacity
	// no old lease can hold).
	RecoveringUntil *time.Time `json:"recovering_until,omitempty"`
	// Revoked counts leases the server took back (an operator's revoke,
	// a revocation policy, or a suspension with revoke_held).
	Revoked int64 `json:"revoked"`
	// Suspended: an operator suspended the pool; it grants no leases until
	// resumed.
	Suspended bool `json:"suspended"`
	// ThrottleReason says why adaptive control lowered the effective
	// limits ("errors" or "latency"); absent when it did not.
	ThrottleReason string `json:"throttle_reason,omitempty"`
	// ShareHolders is the number of live rate shares, and SharesGranted
	// the rate granted to them, in tokens per second.
	ShareHolders  int64   `json:"share_holders"`
	SharesGranted float64 `json:"shares_granted"`
	// Instances of an active or passive pool, those free, and a passive
	// pool's live providers.
	Resources     int64 `json:"resources,omitempty"`
	ResourcesFree int64 `json:"resources_free"`
	Providers     int64 `json:"providers,omitempty"`
	// WaitGrants counts the grants of the last minute (limiter.WaitWindow),
	// and WaitP50Ms and WaitP99Ms are the median and 99th percentile of
	// their waits from the acquire to the grant, in milliseconds (bucket
	// upper edges: at most 25% above the true value; GetStats).
	WaitGrants int64   `json:"wait_grants"`
	WaitP50Ms  float64 `json:"wait_p50_ms"`
	WaitP99Ms  float64 `json:"wait_p99_ms"`
}

// EventsResponse is the JSON of GET /api/events.
type EventsResponse struct {
	Events []events.Event `json:"events"`
}

// pools lists the pools of the terms ts (those of the shards the server
// leads), merged in name order.
func (h *handler) pools(w http.ResponseWriter, r *http.Request, ts []*term.Term) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q, poolsDefaultLimit, poolsMaxLimit)
	if !ok {
		return
	}
	writeJSON(w, h.localPools(ts, q.Get("after"), limit))
}

// clusterPools answers GET /api/pools on a server of a cluster: the pools
// of the shards it leads, and the other servers' (Options.Peers), merged
// in name order, each with its owner.
func (h *handler) clusterPools(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q, poolsDefaultLimit, poolsMaxLimit)
	if !ok {
		return
	}
	var led []*term.Term
	served := h.o.Terms.Served()
	for _, t := range served {
		if t.Leading() {
			led = append(led, t)
		}
	}
	var local PoolsResponse
	if len(led) > 0 {
		local = h.localPools(led, q.Get("after"), limit)
	} else {
		local = PoolsResponse{Time: served[0].Engine().Clock().Now(), Serving: h.o.Serving()}
	}
	for i := range local.Pools {
		local.Pools[i].Owner = h.o.Self
	}
	peers := h.o.Peers(r, q.Get("after"), limit)
	lists := append([]fanout.List[Pool]{{Items: local.Pools, More: local.More}}, peers.Lists...)
	resp := local
	resp.Pools, resp.More = fanout.Merge(lists, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) },
		func(p Pool) string { return p.Name }, limit)
	resp.Total += peers.Total
	resp.Unreachable = peers.Unreachable
	if resp.Pools == nil {
		resp.Pools = []Pool{}
	}
	writeJSON(w, resp)
}

// localPools lists the pools of the terms ts after after, at most limit,
// merged in name order.
func (h *handler) localPools(ts []*term.Term, after string, limit int) PoolsResponse {
	// Each pool with the engine that serves it.
	type served struct {
		info limiter.PoolInfo
		eng  *limiter.Engine
	}
	infos, more := term.Page(ts, limit, func(p served) string { return p.info.Config.Name },
		func(eng *limiter.Engine) ([]served, bool) {
			infos, more := eng.ListPools(after, limit)
			out := make([]served, len(infos))
			for i, info := range infos {
				out[i] = served{info, eng}
			}
			return out, more
		})
	total := 0
	for _, t := range ts {
		total += t.Engine().NumPools()
	}
	resp := PoolsResponse{
		Time:    ts[0].Engine().Clock().Now(),
		Serving: h.o.Serving(),
		Total:   total,
		More:    more,
		Pools:   make([]Pool, 0, len(infos)),
	}
	for i := range infos {
		var wt limiter.WaitTimes
		if st, err := infos[i].eng.PoolStats(infos[i].info.Config.Name); err == nil { // deleted meanwhile: no waits
			wt = st.WaitTimes
		}
		resp.Pools = append(resp.Pools, PoolOf(&infos[i].info, wt.Count, wt.P50, wt.P99))
	}
	return resp
}

// queryLimit reads the limit query parameter of a paged endpoint: def when
// absent, capped at most. It answers 400 and returns false when it is not a
// positive integer.
func queryLimit(w http.ResponseWriter, q url.Values, def, most int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		writeText(w, http.StatusBadRequest, "limit must be a positive integer\n")
		return 0, false
	}
	return min(n, most), true
}

// PoolOf is a pool as the status page shows it: info, and the count, the
// median and the 99th percentile of its recent waits (GetStats).
func PoolOf(info *limiter.PoolInfo, waitGrants int64, p50, p99 time.Duration) Pool {
	c, st := info.Config, info.Status
	var recovering *time.Time
	if !st.RecoveringUntil.IsZero() {
		recovering = &st.RecoveringUntil
	}
	var effective *Limits
	if st.EffectiveConcurrencyLimit != c.ConcurrencyLimit || st.EffectiveRate != c.Rate {
		effective = &Limits{
			ConcurrencyLimit: st.EffectiveConcurrencyLimit,
			Rate:             st.EffectiveRate,
			Burst:            c.Burst,
			MaxWaiters:       c.MaxWaiters,
			DefaultLeaseTTL:  c.DefaultLeaseTTL.String(),
			MaxLeaseTTL:      c.MaxLeaseTTL.String(),
		}
	}
	kind := ""
	if c.ResourceKind != limiter.ResourceFree {
		kind = c.ResourceKind.String()
	}
	return Pool{
		Name:         c.Name,
		Description:  c.Description,
		ResourceKind: kind,
		Configured: Limits{
			ConcurrencyLimit: c.ConcurrencyLimit,
			Rate:             c.Rate,
			Burst:            c.Burst,
			MaxWaiters:       c.MaxWaiters,
			DefaultLeaseTTL:  c.DefaultLeaseTTL.String(),
			MaxLeaseTTL:      c.MaxLeaseTTL.String(),
		},
		Effective: effective,
		Status: PoolStatus{
			Held: st.Held, Leases: st.Leases, Waiting: st.Waiting, WaitingWeight: st.WaitingWeight,
			Granted: st.Granted, Released: st.Released, Expired: st.Expired, Rejected: st.Rejected,
			WaitTimeouts: st.WaitTimeouts, Canceled: st.Canceled,
			TokensGranted: st.TokensGranted, TokensAvailable: st.TokensAvailable,
			RecoveringUntil: recovering,
			Revoked:         st.Revoked, Suspended: st.Suspended, ThrottleReason: st.ThrottleReason.String(),
			ShareHolders: st.ShareHolders, SharesGranted: st.SharesGranted,
			Resources: st.Resources, ResourcesFree: st.ResourcesFree, Providers: st.Providers,
			WaitGrants: waitGrants, WaitP50Ms: millis(p50), WaitP99Ms: millis(p99),
		},
		CreateTime: info.CreateTime,
		UpdateTime: info.UpdateTime,
	}
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (h *handler) events(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, EventsResponse{Events: h.o.RecentEvents()})
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
