package auth

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"*", "", true},
		{"*", "a/b.c", true},
		{"orders-*", "orders-db", true},
		{"orders-*", "orders-", true},
		{"orders-*", "order-db", false},
		{"*.internal", "w1.orders.internal", true},
		{"*.internal", "internal", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"**", "x", true},
	} {
		if got := globMatch(c.pat, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pat, c.s, got, c.want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy("p.yaml", []byte("rules:\n  - clients: [\"worker-*\"]\n    pools: [\"orders-*\", shared]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Allows([]string{"x", "worker-2"}, "shared") || p.Allows([]string{"x"}, "shared") || p.Allows([]string{"worker-2"}, "billing") {
		t.Fatalf("policy %+v decides wrongly", p)
	}
	for _, bad := range []string{
		"rule:\n  - clients: [a]\n",                     // unknown key
		"rules:\n  - clients: [a]\n",                    // no pools
		"rules:\n  - clients: [a]\n    pools: [\"\"]\n", // empty pattern
		"rules: 3\n",
	} {
		if _, err := ParsePolicy("p.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "p.yaml") {
			t.Errorf("ParsePolicy(%q) = %v, want an error naming the file", bad, err)
		}
	}
	if p, err := ParsePolicy("p.yaml", nil); err != nil || len(p.Rules) != 0 {
		t.Errorf("empty policy = %v, %v; want no rules (nothing allowed but admins)", p, err)
	}
}
