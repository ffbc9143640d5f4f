package hatest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/internal/events"
)

// maxViolations is how many violations of one kind a check reports.
const maxViolations = 10

// Result is what the checker found.
type Result struct {
	Holds, Takes  int            // records checked
	ConfigAcked   int            // acknowledged config changes
	ConfigChecked int            // pools whose final config was compared
	Events        int            // events observed (KindEvent)
	HealthChecks  int            // health checks observed (KindHealth)
	Violations    []string       // the first few of each kind
	byKind        map[string]int // violations found, per kind
}

// OK reports whether no violation was found.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Count returns how many violations of kind (overlap, instance, token,
// config, rate, ended, health) were found, including those not listed.
func (r *Result) Count(kind string) int { return r.byKind[kind] }

func (r *Result) add(kind, format string, args ...any) {
	if r.byKind == nil {
		r.byKind = map[string]int{}
	}
	r.byKind[kind]++
	if r.byKind[kind] <= maxViolations {
		r.Violations = append(r.Violations, kind+": "+fmt.Sprintf(format, args...))
	}
}

// Limits are the limits of the pools under load, as the checker holds
// them against the history.
type Limits struct {
	// Concurrency is each pool's concurrency limit; a pool not in it is
	// not checked for weight (a rate-only pool).
	Concurrency map[string]int64
	// Rate is each rate pool's token bucket.
	Rate map[string]Bucket
}

// Bucket is a pool's rate limit: Rate tokens a second, Burst at once.
type Bucket struct {
	Rate  float64
	Burst int64
}

// Check checks a history against the pools' limits; final gives the
// concurrency limit of each pool as the leader has it at the end (a pool
// missing from final does not exist there). It finds:
//   - an instant at which a pool's holds held more weight than its limit;
//   - an instance held by two holds at one instant;
//   - a fencing token given twice in a pool, or a hold whose acquire was
//     called after another hold's grant with a token not above it;
//   - more tokens taken from a rate pool in a window than its rate times
//     the window plus its burst (counting only takes certainly decided in
//     the window: called after it began and answered before it ended);
//   - an acknowledged config change not on the leader at the end (the
//     last acknowledged limit, or one attempted after it whose outcome is
//     unknown);
//   - an event that says a lease ended (lease_expired, lease_revoked) at
//     a time before its holder's hold ended: the holder still held it,
//     renewing it (a holder's hold ends by its local deadline, before any
//     server can see the lease expire);
//   - an instant at which two servers reported tollgate.v1.LimiterService
//     SERVING: a server counts as SERVING from the answer of one SERVING
//     check to the sending of its next check, when that also answered
//     SERVING.
//
// A hold counts from its grant (Start) to its end (End); at equal times
// ends come before starts, so a permit handed from one holder to the next
// at one instant is not an overlap.
func Check(recs []Record, limits Limits, final map[string]int64) Result {
	var r Result
	byPool := map[string][]Record{}
	takes := map[string][]Record{}
	var evs, health []Record
	for _, rec := range recs {
		switch rec.Kind {
		case KindHold:
			r.Holds++
			byPool[rec.Pool] = append(byPool[rec.Pool], rec)
		case KindTake:
			r.Takes++
			takes[rec.Pool] = append(takes[rec.Pool], rec)
		case KindEvent:
			r.Events++
			evs = append(evs, rec)
		case KindHealth:
			r.HealthChecks++
			health = append(health, rec)
		}
	}
	checkEnded(&r, evs, byPool)
	checkHealth(&r, health)
	for _, p := range sortedKeys(byPool) {
		holds := byPool[p]
		if limit, ok := limits.Concurrency[p]; ok {
			checkWeight(&r, p, holds, limit)
		}
		checkInstances(&r, p, holds)
		checkTokens(&r, p, holds)
	}
	for _, p := range sortedKeys(takes) {
		if b, ok := limits.Rate[p]; ok {
			checkRate(&r, p, takes[p], b)
		}
	}
	checkConfig(&r, recs, final)
	return r
}

// edge is a hold starting (+weight) or ending (-weight) at a time.
type edge struct {
	at    int64
	delta int64
	hold  *Record
}

// sweep returns the starts and ends of holds in time order, ends first at
// equal times.
func sweep(holds []Record, weight func(*Record) int64) []edge {
	edges := make([]edge, 0, 2*len(holds))
	for i := range holds {
		h := &holds[i]
		if h.End < h.Start {
			continue // held for no time at all
		}
		w := weight(h)
		edges = append(edges, edge{h.Start, w, h}, edge{h.End, -w, h})
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	return edges
}

func checkWeight(r *Result, pool string, holds []Record, limit int64) {
	var held int64
	live := map[*Record]bool{}
	over := false
	for _, e := range sweep(holds, func(h *Record) int64 { return max(h.Weight, 1) }) {
		held += e.delta
		if e.delta > 0 {
			live[e.hold] = true
		} else {
			delete(live, e.hold)
		}
		if held > limit && !over {
			r.add("overlap", "pool %s: weight %d held at %s; its limit is %d (holds %s)", pool, held, stamp(e.at), limit, describe(live))
		}
		over = held > limit // report each excursion once
	}
}

func checkInstances(r *Result, pool string, holds []Record) {
	byInstance := map[string][]Record{}
	for _, h := range holds {
		for _, id := range h.Instances {
			byInstance[id] = append(byInstance[id], h)
		}
	}
	for _, id := range sortedKeys(byInstance) {
		live := map[*Record]bool{}
		for _, e := range sweep(byInstance[id], func(*Record) int64 { return 1 }) {
			if e.delta < 0 {
				delete(live, e.hold)
				continue
			}
			live[e.hold] = true
			if len(live) > 1 {
				r.add("instance", "pool %s: instance %s held by %d at %s (holds %s)", pool, id, len(live), stamp(e.at), describe(live))
			}
		}
	}
}

func checkTokens(r *Result, pool string, holds []Record) {
	seen := map[uint64]*Record{}
	for i := range holds {
		h := &holds[i]
		if first, ok := seen[h.Token]; ok {
			r.add("token", "pool %s: fencing token %d granted twice (to %s at %s and to %s at %s)", pool, h.Token, first.Worker, stamp(first.Start), h.Worker, stamp(h.Start))
			continue
		}
		seen[h.Token] = h
	}
	// Every hold whose acquire was called after another's grant must have
	// a larger token: sweep the calls in order, keeping the largest token
	// granted before each.
	byGrant := slices.Clone(holds)
	slices.SortFunc(byGrant, func(a, b Record) int { return cmp.Compare(a.Start, b.Start) })
	byCall := slices.Clone(holds)
	slices.SortFunc(byCall, func(a, b Record) int { return cmp.Compare(a.Called, b.Called) })
	var top *Record
	g := 0
	for i := range byCall {
		b := &byCall[i]
		for ; g < len(byGrant) && byGrant[g].Start < b.Called; g++ {
			if top == nil || byGrant[g].Token > top.Token {
				top = &byGrant[g]
			}
		}
		if top != nil && b.Token < top.Token { // equal: reported as granted twice
			r.add("token", "pool %s: token %d was granted to %s at %s; %s's acquire, called after that at %s, got the smaller token %d", pool, top.Token, top.Worker, stamp(top.Start), b.Worker, stamp(b.Called), b.Token)
		}
	}
}

func checkConfig(r *Result, recs []Record, final map[string]int64) {
	type attempts struct{ list []Record }
	byPool := map[string]*attempts{}
	for _, rec := range recs {
		if rec.Kind != KindConfig {
			continue
		}
		if rec.Acked {
			r.ConfigAcked++
		}
		a := byPool[rec.Pool]
		if a == nil {
			a = &attempts{}
			byPool[rec.Pool] = a
		}
		a.list = append(a.list, rec)
	}
	for _, p := range sortedKeys(byPool) {
		list := byPool[p].list
		slices.SortFunc(list, func(a, b Record) int { return cmp.Compare(a.Seq, b.Seq) })
		last := -1
		for i, rec := range list {
			if rec.Acked {
				last = i
			}
		}
		if last < 0 {
			continue // nothing acknowledged: nothing can be lost
		}
		r.ConfigChecked++
		// The last acknowledged value, or any attempted after it whose
		// outcome is unknown.
		allowed := []int64{list[last].Limit}
		for _, rec := range list[last+1:] {
			allowed = append(allowed, rec.Limit)
		}
		got, ok := final[p]
		switch {
		case !ok:
			r.add("config", "pool %s is missing on the leader; its last acknowledged change (attempt %d, at %s) set limit %d", p, list[last].Seq, stamp(list[last].Start), list[last].Limit)
		case !slices.Contains(allowed, got):
			r.add("config", "pool %s has limit %d on the leader; its last acknowledged change (attempt %d, at %s) set %d (allowed: %v)", p, got, list[last].Seq, stamp(list[last].Start), list[last].Limit, allowed)
		}
	}
}

// checkRate: for every window starting at a take's call, the takes called
// in it, in the order they were answered, never outnumber what the bucket
// allows up to the answer.
func checkRate(r *Result, pool string, takes []Record, b Bucket) {
	byCall := slices.Clone(takes)
	slices.SortFunc(byCall, func(x, y Record) int { return cmp.Compare(x.Called, y.Called) })
	answers := make([]int64, 0, len(takes))
	for i, first := range byCall {
		answers = answers[:0]
		for _, t := range byCall[i:] {
			answers = append(answers, t.Start)
		}
		slices.Sort(answers)
		for k, at := range answers {
			allowed := b.Rate*time.Duration(at-first.Called).Seconds() + float64(b.Burst)
			if float64(k+1) > allowed {
				r.add("rate", "pool %s: %d tokens taken between %s and %s; its rate %g/s and burst %d allow %.1f", pool, k+1, stamp(first.Called), stamp(at), b.Rate, b.Burst, allowed)
				return // one report per pool
			}
		}
	}
}

// checkEnded finds lease-end events about leases their holders still
// held.
func checkEnded(r *Result, evs []Record, holds map[string][]Record) {
	for _, ev := range evs {
		if ev.Op != events.LeaseExpired && ev.Op != events.LeaseRevoked {
			continue
		}
		for _, h := range holds[ev.Pool] {
			if h.Token == ev.Token && ev.Decided < h.End {
				r.add("ended", "%s published %s of pool %s token %d at %s (received %s), but %s held it until %s", ev.Server, ev.Op, ev.Pool, ev.Token,
					stamp(ev.Decided), stamp(ev.Start), h.Worker, stamp(h.End))
			}
		}
	}
}

// checkHealth finds two servers SERVING at one instant.
func checkHealth(r *Result, checks []Record) {
	type span struct {
		server   string
		from, to int64
	}
	byServer := map[string][]Record{}
	for _, c := range checks {
		byServer[c.Server] = append(byServer[c.Server], c)
	}
	var spans []span
	for _, s := range sortedKeys(byServer) {
		cs := byServer[s]
		slices.SortFunc(cs, func(a, b Record) int { return cmp.Compare(a.Called, b.Called) })
		for i := 1; i < len(cs); i++ {
			if cs[i-1].Op == "SERVING" && cs[i].Op == "SERVING" && cs[i-1].Start < cs[i].Called {
				spans = append(spans, span{s, cs[i-1].Start, cs[i].Called})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	reported := map[string]bool{}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if b.from >= a.to {
				break
			}
			first, second := min(a.server, b.server), max(a.server, b.server)
			key := first + " " + second + " " + strconv.FormatInt(b.from/int64(time.Second), 10)
			if b.server != a.server && !reported[key] {
				reported[key] = true // one report a second per pair
				r.add("health", "%s and %s both reported SERVING from %s to %s", first, second, stamp(b.from), stamp(min(a.to, b.to)))
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func describe(live map[*Record]bool) string {
	s := ""
	hs := make([]*Record, 0, len(live))
	for h := range live {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *Record) int { return cmp.Compare(a.Token, b.Token) })
	for i, h := range hs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s token %d weight %d %s..%s", h.Worker, h.Token, max(h.Weight, 1), stamp(h.Start), stamp(h.End))
	}
	return s
}

func stamp(n int64) string { return Time(n).Format("15:04:05.000000") }
