package hatest

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// PoolKind is a pool under load and the name of its kind in the tables.
type PoolKind struct {
	Pool string
	Kind string // "rate-only", "concurrency, headroom", ...
	// GrantOp is the answer that is a new grant: "acquire", or "take"
	// for a rate-only pool.
	GrantOp string
}

// Recovery is how a pool came back after a fault.
type Recovery struct {
	PoolKind
	// From the fault to the first renew answered and to the first new
	// grant, by a server other than the one excluded; -1 when none came.
	Renew, Grant time.Duration
	// The longest time between two grants, from the last grant before
	// the fault until the end of the load.
	Pause time.Duration
	// Grants answered by the excluded server after the fault, and the
	// time from the fault to the last of them.
	Excluded     int
	LastExcluded time.Duration
}

// Measure computes each pool's Recovery from the answers in recs: fault
// is when the fault was made, exclude the address of a server whose
// answers do not count (the faulted leader; "" for none), end when the
// load ended.
func Measure(recs []Record, fault, end time.Time, exclude string, pools []PoolKind) []Recovery {
	f, e := Nanos(fault), Nanos(end)
	out := make([]Recovery, 0, len(pools))
	for _, pk := range pools {
		r := Recovery{PoolKind: pk, Renew: -1, Grant: -1}
		var grants []int64
		for _, rec := range recs {
			if rec.Kind != KindAnswer || rec.Pool != pk.Pool || rec.Start > e {
				continue
			}
			if rec.Op == pk.GrantOp {
				grants = append(grants, rec.Start)
			}
			if rec.Start <= f {
				continue
			}
			d := time.Duration(rec.Start - f)
			if rec.Server == exclude {
				if rec.Op == pk.GrantOp {
					r.Excluded++
					r.LastExcluded = max(r.LastExcluded, d)
				}
				continue
			}
			switch {
			case rec.Op == pk.GrantOp && (r.Grant < 0 || d < r.Grant):
				r.Grant = d
			case rec.Op == "renew" && (r.Renew < 0 || d < r.Renew):
				r.Renew = d
			}
		}
		slices.Sort(grants)
		i, _ := slices.BinarySearch(grants, f+1)
		prev := f // no grant before the fault: count from it
		if i > 0 {
			prev = grants[i-1]
		}
		for _, g := range append(grants[i:], e) {
			r.Pause = max(r.Pause, time.Duration(g-prev))
			prev = g
		}
		out = append(out, r)
	}
	return out
}

// DecidedAfter returns the grants and renews that server decided after t.
func DecidedAfter(recs []Record, server string, t time.Time) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == KindAnswer && r.Server == server && r.Decided > Nanos(t) {
			out = append(out, r)
		}
	}
	return out
}

// Table formats recoveries as a Markdown table, in milliseconds, headed
// by title.
func Table(title string, rs []Recovery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (ms from the fault; - = none)\n\n", title)
	b.WriteString("| pool | first renew answered | first new grant | longest pause in grants | grants by the faulted server after the fault (last) |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return fmt.Sprint(d.Milliseconds())
	}
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d (%s) |\n", r.Kind, ms(r.Renew), ms(r.Grant), ms(r.Pause), r.Excluded, ms(r.LastExcluded))
	}
	return b.String()
}

// LostBetween counts the holds in recs that the client ended (lease lost)
// from from to before to.
func LostBetween(recs []Record, from, to time.Time) int {
	f, e := Nanos(from), Nanos(to)
	n := 0
	for _, r := range recs {
		if r.Kind == KindHold && r.Lost && r.End >= f && r.End < e {
			n++
		}
	}
	return n
}

// Waits is how long the calls made in a window waited for their answers.
type Waits struct {
	// Acquires made (granted or not), and those not granted (refused, or
	// given up after the worker's 2 s); the waits count both.
	Acquires, Refused int
	Acquire           []time.Duration
	// Renews sent (first sent, however often sent again) and answered.
	Renews int
	Renew  []time.Duration
	// From from to the first grant and to the first renew answered in the
	// pools by a server other than the excluded one, whenever they were
	// called; -1 when none came before to.
	FirstGrant, FirstRenew time.Duration
}

// WaitsIn returns the waits of the acquires in acquirePools and the renews
// in renewPools made from from to before to, and the first grant and renew
// answered in that time by a server other than exclude ("" for none).
func WaitsIn(recs []Record, acquirePools, renewPools map[string]bool, exclude string, from, to time.Time) Waits {
	f, e := Nanos(from), Nanos(to)
	w := Waits{FirstGrant: -1, FirstRenew: -1}
	first := func(d *time.Duration, at int64) {
		if at > f && at < e && (*d < 0 || time.Duration(at-f) < *d) {
			*d = time.Duration(at - f)
		}
	}
	for _, r := range recs {
		switch {
		case r.Kind != KindAnswer || r.Server == exclude:
		case r.Op == "acquire" && acquirePools[r.Pool]:
			first(&w.FirstGrant, r.Start)
		case r.Op == "renew" && renewPools[r.Pool]:
			first(&w.FirstRenew, r.Start)
		}
		if r.Called < f || r.Called >= e {
			continue
		}
		switch {
		case (r.Kind == KindHold || r.Kind == KindRefused) && acquirePools[r.Pool]:
			w.Acquires++
			if r.Kind == KindRefused {
				w.Refused++
			}
			w.Acquire = append(w.Acquire, time.Duration(r.Start-r.Called))
		case r.Kind == KindAnswer && r.Op == "renew" && renewPools[r.Pool]:
			w.Renews++
			w.Renew = append(w.Renew, time.Duration(r.Start-r.Called))
		}
	}
	return w
}

// MedMax is "median / max" of ds in ms, or "-" for none.
func MedMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%d / %d", s[len(s)/2].Milliseconds(), s[len(s)-1].Milliseconds())
}

// Ms is d in ms, or "none" when negative.
func Ms(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return fmt.Sprint(d.Milliseconds())
}
