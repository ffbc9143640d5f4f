// Package suggest finds the names close to a mistyped one, for "did you
// mean" hints: the names within a small edit distance (insertions,
// deletions, substitutions and swaps of neighbours), nearest first.
package suggest

import (
	"sort"
	"strings"
)

// MaxNames is the most names Near returns.
const MaxNames = 3

// maxDistance is the most edits a suggestion may be from a word of n
// bytes: 1 for short words, up to 3 for long ones.
func maxDistance(n int) int { return min(3, max(1, n/4)) }

// Near returns up to MaxNames of names within a small edit distance of
// word (case-insensitive), nearest first, ties in the order of names. Its
// cost is bounded by len(names) times the square of the longer word's
// length, and a name whose length alone puts it too far is skipped at once.
func Near(word string, names []string) []string {
	type hit struct {
		name string
		d, i int
	}
	limit := maxDistance(len(word))
	lw := strings.ToLower(word)
	var hits []hit
	for i, n := range names {
		if n == word || abs(len(n)-len(word)) > limit {
			continue
		}
		if d := distance(lw, strings.ToLower(n)); d <= limit {
			hits = append(hits, hit{n, d, i})
		}
	}
	sort.Slice(hits, func(a, b int) bool {
		if hits[a].d != hits[b].d {
			return hits[a].d < hits[b].d
		}
		return hits[a].i < hits[b].i
	})
	out := make([]string, 0, min(len(hits), MaxNames))
	for _, h := range hits[:min(len(hits), MaxNames)] {
		out = append(out, h.name)
	}
	return out
}

// Hint is " (did you mean X?)", " (did you mean X or Y?)" or "" for the
// names Near found, each formatted by quote.
func Hint(near []string, quote func(string) string) string {
	if len(near) == 0 {
		return ""
	}
	q := make([]string, len(near))
	for i, n := range near {
		q[i] = quote(n)
	}
	if len(q) == 1 {
		return " (did you mean " + q[0] + "?)"
	}
	return " (did you mean " + strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1] + "?)"
}

// distance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of adjacent bytes
// that turn a into b.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
