package hatest

import (
	"strings"
	"testing"
)

// hold is a synthetic hold: called at c, granted at s, ended at e (ms).
func hold(worker, pool string, token uint64, weight int64, c, s, e int64, instances ...string) Record {
	const ms = 1e6
	return Record{Kind: KindHold, Worker: worker, Pool: pool, Token: token, Weight: weight, Called: c * ms, Start: s * ms, End: e * ms, Instances: instances}
}

// take is a synthetic take of one token: called at c, answered at s (ms).
func take(pool string, c, s int64) Record {
	return Record{Kind: KindTake, Worker: "w", Pool: pool, Weight: 1, Called: c * 1e6, Start: s * 1e6}
}

// testLimits: p and q have concurrency limits 2 and 1; r has 10 tokens a
// second and a burst of 2.
var testLimits = Limits{Concurrency: map[string]int64{"p": 2, "q": 1}, Rate: map[string]Bucket{"r": {Rate: 10, Burst: 2}}}

func config(pool string, seq int, limit int64, acked bool) Record {
	return Record{Kind: KindConfig, Worker: "w", Pool: pool, Seq: seq, Limit: limit, Acked: acked, Start: int64(seq) * 1e6}
}

// good is a history with no violation: in pool p (limit 2), a hand-off
// at one instant (10), weights that fill the limit exactly, instances
// reused after their holder ended, tokens in grant order (tokens of
// concurrent acquires in either order), and config changes.
func good() []Record {
	return []Record{
		hold("a", "p", 1, 1, 0, 1, 10, "i1"),
		hold("b", "p", 2, 1, 0, 2, 20, "i2"),
		hold("c", "p", 4, 1, 5, 10, 30, "i1"),        // takes a's place at 10
		hold("d", "p", 3, 1, 5, 20, 40, "i2"),        // called with c, granted later, smaller token
		hold("e", "p", 5, 2, 41, 42, 50, "i1", "i2"), // weight 2 once both ended
		hold("f", "q", 1, 1, 0, 1, 50),               // another pool's tokens are its own
		// r: the burst at once, then one every 100ms; and a take whose
		// wait overlaps others (decided any time from 250 to 500).
		take("r", 0, 1), take("r", 0, 1), take("r", 0, 100), take("r", 100, 200), take("r", 250, 500),
		config("cfg", 1, 10, true),
		config("cfg", 2, 20, true),
		config("cfg", 3, 30, false), // unknown outcome: 20 or 30 is right
		config("other", 1, 5, false),
	}
}

func TestCheckPasses(t *testing.T) {
	for _, final := range []int64{20, 30} {
		r := Check(good(), testLimits, map[string]int64{"cfg": final})
		if !r.OK() {
			t.Fatalf("final limit %d: violations in a good history: %v", final, r.Violations)
		}
		if r.Holds != 6 || r.Takes != 5 || r.ConfigAcked != 2 || r.ConfigChecked != 1 {
			t.Fatalf("checked %d holds, %d takes, %d acked changes, %d config pools; want 6, 5, 2, 1", r.Holds, r.Takes, r.ConfigAcked, r.ConfigChecked)
		}
	}
}

func TestCheckFinds(t *testing.T) {
	finalOK := map[string]int64{"cfg": 20}
	for _, tc := range []struct {
		name  string
		extra []Record
		final map[string]int64
		kind  string
		want  string // in the message
	}{
		{"overlap beyond the limit", []Record{hold("x", "p", 9, 1, 3, 4, 6)}, finalOK, "overlap", "weight 3 held"},
		{"weight overlap", []Record{hold("x", "p", 9, 2, 35, 36, 37)}, finalOK, "overlap", "weight 3 held at 00:00:00.036"},
		{"overlap by one nanosecond", []Record{{Kind: KindHold, Worker: "x", Pool: "q", Token: 9, Called: 49e6, Start: 50e6 - 1, End: 60e6}}, finalOK, "overlap", "limit is 1"},
		{"instance held twice", []Record{hold("x", "inst", 1, 1, 0, 1, 10, "i9"), hold("y", "inst", 2, 1, 0, 5, 15, "i9")}, finalOK, "instance", "instance i9 held by 2"},
		{"token reused", []Record{hold("x", "p", 2, 1, 60, 61, 62)}, finalOK, "token", "fencing token 2 granted twice"},
		{"token below an earlier grant", []Record{hold("x", "p", 1, 1, 100, 101, 102), hold("y", "p", 0, 1, 103, 104, 105)}, finalOK, "token", "got the smaller token"},
		{"rate beyond burst", []Record{take("r", 900, 901), take("r", 900, 901), take("r", 900, 902)}, finalOK, "rate", "3 tokens taken"},
		{"rate beyond rate", []Record{take("r", 1000, 1001), take("r", 1000, 1001), take("r", 1000, 1100), take("r", 1000, 1150)}, finalOK, "rate", "4 tokens taken"},
		{"lost config change", nil, map[string]int64{"cfg": 10}, "config", "has limit 10 on the leader"},
		{"pool gone", nil, map[string]int64{}, "config", "missing on the leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(append(good(), tc.extra...), testLimits, tc.final)
			if r.OK() || r.Count(tc.kind) == 0 {
				t.Fatalf("found %v; want a %s violation", r.Violations, tc.kind)
			}
			if !strings.Contains(strings.Join(r.Violations, "\n"), tc.want) {
				t.Fatalf("violations %v do not say %q", r.Violations, tc.want)
			}
		})
	}
}

// TestCheckReportsEachExcursionOnce: a long overlap is one violation, and
// past maxViolations they are counted but not listed.
func TestCheckReportsEachExcursionOnce(t *testing.T) {
	var recs []Record
	for i := range int64(30) {
		// Two holds of weight 1 in a pool of limit 1, every 10ms.
		recs = append(recs, hold("x", "q", uint64(2*i+1), 1, 10*i, 10*i+1, 10*i+5), hold("y", "q", uint64(2*i+2), 1, 10*i, 10*i+2, 10*i+6))
	}
	r := Check(recs, testLimits, nil)
	if r.Count("overlap") != 30 || len(r.Violations) != maxViolations {
		t.Fatalf("%d overlaps counted, %d listed; want 30, %d", r.Count("overlap"), len(r.Violations), maxViolations)
	}
}

func event(server, typ, pool string, token uint64, at int64) Record {
	return Record{Kind: KindEvent, Server: server, Op: typ, Pool: pool, Token: token, Decided: at * 1e6, Start: at * 1e6}
}

func health(server, st string, sent, answered int64) Record {
	return Record{Kind: KindHealth, Server: server, Op: st, Called: sent * 1e6, Start: answered * 1e6}
}

// A lease-end event about a lease its holder held later is reported; one
// at or after the hold's end is not.
func TestCheckEndedWhileHeld(t *testing.T) {
	recs := append(good(),
		event("s1", "lease_expired", "p", 1, 10),  // a's hold ended at 10: fine
		event("s1", "lease_revoked", "q", 1, 60),  // f's ended at 50: fine
		event("s1", "pool_drained", "p", 0, 5),    // not a lease end
		event("s2", "lease_expired", "p", 4, 25),  // c held it until 30
		event("s2", "lease_expired", "p", 99, 25)) // no such hold
	r := Check(recs, testLimits, map[string]int64{"cfg": 3})
	if r.Count("ended") != 1 || !strings.Contains(strings.Join(r.Violations, "\n"), "s2 published lease_expired of pool p token 4") {
		t.Fatalf("violations %v; want one: s2's expiry of token 4", r.Violations)
	}
}

// Two servers SERVING between consecutive checks of each is reported; a
// hand-over with no common instant is not, nor a single SERVING answer.
func TestCheckHealthOverlap(t *testing.T) {
	handOver := []Record{
		health("a", "SERVING", 0, 1), health("a", "SERVING", 10, 11), health("a", "NOT_SERVING", 20, 21),
		health("b", "NOT_SERVING", 0, 1), health("b", "SERVING", 12, 13), health("b", "SERVING", 22, 23), health("b", "SERVING", 30, 31),
		health("c", "SERVING", 5, 6), health("c", "error", 15, 16), // one SERVING answer: no span
	}
	if r := Check(handOver, testLimits, nil); r.Count("health") != 0 || r.HealthChecks != len(handOver) {
		t.Fatalf("a hand-over was reported: %v (%d checks)", r.Violations, r.HealthChecks)
	}
	both := append(handOver, health("a", "SERVING", 25, 26), health("a", "SERVING", 35, 36)) // a serves again from 26 to 35, with b
	r := Check(both, testLimits, nil)
	if r.Count("health") != 1 || !strings.Contains(r.Violations[0], "a and b both reported SERVING") {
		t.Fatalf("violations %v; want a and b serving at once", r.Violations)
	}
}
