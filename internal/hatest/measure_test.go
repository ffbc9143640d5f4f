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

// TestWaitsIn: a change at 1s; calls made from 1s to 3s count, the first
// grant and renew by a server other than the one that left (a) count
// until the end.
func TestWaitsIn(t *testing.T) {
	ms := func(n int64) int64 { return n * 1e6 }
	renew := answer("renew", "p", "b", 1500, 1500)
	renew.Called = ms(1200)
	recs := []Record{
		{Kind: KindHold, Pool: "p", Called: ms(900), Start: ms(1300)},     // made before: not counted
		{Kind: KindHold, Pool: "p", Called: ms(1000), Start: ms(1010)},    // 10 ms
		{Kind: KindRefused, Pool: "p", Called: ms(1100), Start: ms(3100)}, // 2 s, refused
		{Kind: KindHold, Pool: "p", Called: ms(2000), Start: ms(2030)},    // 30 ms
		{Kind: KindHold, Pool: "q", Called: ms(2000), Start: ms(2900)},    // another pool
		{Kind: KindHold, Pool: "p", Called: ms(3000), Start: ms(3001)},    // made after
		answer("acquire", "p", "a", 1010, 1010),                           // the old owner's
		answer("acquire", "p", "b", 2030, 2030),
		renew,
	}
	w := WaitsIn(recs, map[string]bool{"p": true}, map[string]bool{"p": true}, "a", Time(ms(1000)), Time(ms(3000)))
	if w.Acquires != 3 || w.Refused != 1 || MedMax(w.Acquire) != "30 / 2000" {
		t.Errorf("acquires %d (refused %d): %s; want 3 (1): 30 / 2000", w.Acquires, w.Refused, MedMax(w.Acquire))
	}
	if w.Renews != 1 || MedMax(w.Renew) != "300 / 300" {
		t.Errorf("renews %d: %s; want 1: 300 / 300", w.Renews, MedMax(w.Renew))
	}
	if w.FirstGrant != 1030*time.Millisecond || w.FirstRenew != 500*time.Millisecond {
		t.Errorf("first grant %v, first renew %v; want 1.03s, 500ms", w.FirstGrant, w.FirstRenew)
	}
	if none := WaitsIn(nil, nil, nil, "", Time(0), Time(1)); Ms(none.FirstGrant) != "none" || MedMax(none.Acquire) != "-" {
		t.Errorf("no records: %+v", none)
	}
}

// TestShardMap: the shards that moved, and the shards per server as the
// logs print them.
func TestShardMap(t *testing.T) {
	a := ShardMap{Owners: []string{"x", "y", "x", ""}}
	b := ShardMap{Owners: []string{"x", "z", "y", "y"}}
	if got := a.Moved(b); len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Errorf("Moved: %v; want [1 2 3]", got)
	}
	if got := a.String(); got != "x=2, y=1, none=1" {
		t.Errorf("String: %q", got)
	}
}
