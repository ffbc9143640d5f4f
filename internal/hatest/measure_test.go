package hatest

import (
	"strings"
	"testing"
	"time"
)

func answer(op, pool, server string, atMs, decidedMs int64) Record {
	return Record{Kind: KindAnswer, Op: op, Pool: pool, Server: server, Start: atMs * 1e6, Decided: decidedMs * 1e6}
}

// TestMeasure: the fault is at 1s on server a; b takes over.
func TestMeasure(t *testing.T) {
	recs := []Record{
		answer("acquire", "p", "a", 400, 400),  // last grant before the fault
		answer("renew", "p", "a", 900, 900),    // before the fault
		answer("acquire", "p", "a", 1100, 990), // a's, after the fault: not recovery
		answer("renew", "p", "b", 2500, 2500),
		answer("acquire", "p", "b", 3000, 3000),
		answer("acquire", "p", "b", 3500, 3500),
		answer("take", "r", "b", 1800, 0),
		answer("acquire", "q", "b", 6000, 6000), // after the end
	}
	ms := func(n int64) time.Time { return Time(n * 1e6) }
	got := Measure(recs, ms(1000), ms(5000), "a", []PoolKind{
		{Pool: "p", Kind: "conc", GrantOp: "acquire"},
		{Pool: "r", Kind: "rate", GrantOp: "take"},
		{Pool: "q", Kind: "none", GrantOp: "acquire"},
	})
	want := []Recovery{
		// From the grant at 400 to the next, by b at 3000 (a's at 1100
		// counts as a grant, not as recovery).
		{Renew: 1500 * time.Millisecond, Grant: 2000 * time.Millisecond, Pause: 1900 * time.Millisecond, Excluded: 1, LastExcluded: 100 * time.Millisecond},
		{Renew: -1, Grant: 800 * time.Millisecond, Pause: 3200 * time.Millisecond},
		{Renew: -1, Grant: -1, Pause: 4000 * time.Millisecond},
	}
	for i, w := range want {
		g := got[i]
		g.PoolKind = PoolKind{}
		if g != w {
			t.Errorf("pool %s: %+v; want %+v", got[i].Pool, g, w)
		}
	}
	table := Table("kill", got)
	for _, line := range []string{"| conc | 1500 | 2000 | 1900 | 1 (100) |", "| rate | - | 800 | 3200 | 0 (0) |", "| none | - | - | 4000 | 0 (0) |"} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, table)
		}
	}

	late := DecidedAfter(recs, "a", ms(950))
	if len(late) != 1 || late[0].Start != 1100*1e6 {
		t.Errorf("DecidedAfter(a, 950ms) = %+v; want a's grant decided at 990ms", late)
	}
}
