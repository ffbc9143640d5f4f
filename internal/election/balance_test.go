package election

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// moved counts the shards whose owner differs between a and b.
func moved(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// loads counts each member's shards in owners.
func loads(owners []string) map[string]int {
	l := map[string]int{}
	for _, o := range owners {
		l[o]++
	}
	return l
}

func members(r *rand.Rand, m int) []string {
	var out []string
	for len(out) < m {
		a := fmt.Sprintf("10.%d.%d.%d:%d", r.IntN(256), r.IntN(256), r.IntN(256), 7000+r.IntN(100))
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

func TestAssignBalances(t *testing.T) {
	if got := Assign(nil, 3); !slices.Equal(got, []string{"", "", ""}) {
		t.Fatalf("Assign(no members) = %q", got)
	}
	if got := Assign([]string{"a"}, 4); !slices.Equal(got, []string{"a", "a", "a", "a"}) {
		t.Fatalf("Assign(one member) = %q", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		m := 1 + r.IntN(12)
		n := 1 + r.IntN(600)
		ms := members(r, m)
		owners := Assign(ms, n)
		if !slices.Equal(owners, Assign(slices.Clone(ms), n)) {
			t.Fatal("Assign is not deterministic")
		}
		limit := (n + m - 1) / m
		for o, l := range loads(owners) {
			if !slices.Contains(ms, o) {
				t.Fatalf("shard given to %q, not a member of %q", o, ms)
			}
			if l > limit {
				t.Fatalf("%d shards over %d members: %s has %d, above ceil(N/M) = %d", n, m, o, l, limit)
			}
		}
		if n >= 4*m {
			mean := float64(n) / float64(m)
			for o, l := range loads(owners) {
				if float64(l) > 1.25*mean {
					t.Fatalf("%d shards over %d members: %s has %d, above 1.25 × the mean %.1f", n, m, o, l, mean)
				}
			}
		}
	}
}

// When a member joins or leaves, the shards that move are few: with four
// or more shards a member, the newcomer's share (or the leaver's) and at
// most half as many again between the other members, whose bound
// ceil(N/M) changes. Leaving is joining backwards: the same shards move.
// With fewer shards a member more may move: many shards go to a member
// with room rather than to their first choice.
func TestAssignMovesFew(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{16, 64, 256, 1024} {
		moves, share, worst := 0, 0, 0.0
		fewMoves, fewShare := 0, 0 // joins with four or more shards a member
		const runs = 100
		for range runs {
			m := 2 + r.IntN(8)
			ms := members(r, m+1)
			joined := ms[r.IntN(len(ms))]
			before := Assign(slices.DeleteFunc(slices.Clone(ms), func(a string) bool { return a == joined }), n)
			after := Assign(ms, n)
			got, took := moved(before, after), loads(after)[joined]
			for i := range after {
				if after[i] != before[i] && after[i] != joined && before[i] == joined {
					t.Fatalf("shard %d moved away from the member that joined", i)
				}
			}
			moves += got
			share += took
			if n >= 4*(m+1) {
				fewMoves += got
				fewShare += took
			}
			worst = max(worst, float64(got)/float64(n))
		}
		t.Logf("%4d shards over 2-9 members, one joins: %.1f shards move on average, %.1f of them to it; at worst %.0f%% of the shards move",
			n, float64(moves)/runs, float64(share)/runs, worst*100)
		if fewMoves > 3*fewShare/2 {
			t.Errorf("%d shards: %d moved in joins with four or more shards a member, over 1.5 times the %d the newcomers took", n, fewMoves, fewShare)
		}
	}
	ms := []string{"10.0.0.1:7070", "10.0.0.2:7070", "10.0.0.3:7070"}
	three := Assign(ms, 256)
	four := Assign(append(slices.Clone(ms), "10.0.0.4:7070"), 256)
	t.Logf("256 shards, 3 servers → 4: %d move (%d to the fourth); loads %v → %v", moved(three, four), loads(four)["10.0.0.4:7070"], loads(three), loads(four))
	two := Assign(ms[1:], 256)
	t.Logf("256 shards, 3 servers → 2: %d move (%d were the leaver's); loads %v", moved(three, two), loads(three)[ms[0]], loads(two))
}
