package poolsfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadPoolsFile(t *testing.T) {
	path := writeFile(t, `# pools of the test
pools:
  - name: orders-db
    description: primary database
    concurrency: 20
    rate: 100.5
    burst: 200
    default_ttl: 15s
    max_ttl: 5m
    max_waiters: 64
  - name: api.github.com
    rate: 10
`)
	pools, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.PoolConfig{
		{Name: "orders-db", Description: "primary database", ConcurrencyLimit: 20, Rate: 100.5, Burst: 200,
			DefaultLeaseTTL: 15 * time.Second, MaxLeaseTTL: 5 * time.Minute, MaxWaiters: 64},
		{Name: "api.github.com", Rate: 10, Burst: 10, DefaultLeaseTTL: limiter.DefaultLeaseTTL,
			MaxLeaseTTL: limiter.DefaultMaxLeaseTTL, MaxWaiters: limiter.DefaultMaxWaiters},
	}
	if len(pools) != len(want) {
		t.Fatalf("got %d pools: %+v", len(pools), pools)
	}
	for i := range want {
		if !pools[i].Equal(want[i]) {
			t.Errorf("pool %d = %+v, want %+v", i, pools[i], want[i])
		}
	}
}

func TestLoadPoolsFileEmpty(t *testing.T) {
	for _, content := range []string{"", "# nothing\n", "pools:\n", "pools: []\n"} {
		pools, err := Load(writeFile(t, content))
		if err != nil || len(pools) != 0 {
			t.Errorf("%q: %v, %v", content, pools, err)
		}
	}
}

func TestLoadPoolsFileErrors(t *testing.T) {
	cases := []struct {
		name, content string
		want          []string // substrings of the error
	}{
		{"unknown field", "pools:\n  - name: a\n    concurrency: 1\n    concurency: 2\n", []string{"pools.yaml:4:", `unknown field "concurency"`, "max_waiters"}},
		{"unknown top key", "pool:\n  - name: a\n", []string{"pools.yaml:1:", `unknown key "pool"`}},
		{"not a mapping", "- name: a\n", []string{"pools.yaml:1:", "mapping"}},
		{"pools not a list", "pools: {name: a}\n", []string{"pools.yaml:1:", "list"}},
		{"entry not a mapping", "pools:\n  - a\n", []string{"pools.yaml:2:", "mapping"}},
		{"no name", "pools:\n  - concurrency: 1\n", []string{"pools.yaml:2:", "no name"}},
		{"bad name", "pools:\n  - name: a b\n    concurrency: 1\n", []string{"pools.yaml:2:", "[A-Za-z0-9._:/-]"}},
		{"no limits", "pools:\n  - name: a\n", []string{"pools.yaml:2:", "concurrency_limit, rate, or both"}},
		{"bad int", "pools:\n  - name: a\n    concurrency: lots\n", []string{"pools.yaml:3:", "concurrency must be a whole number"}},
		{"float as int", "pools:\n  - name: a\n    concurrency: 1.5\n", []string{"pools.yaml:3:", "whole number"}},
		{"bad rate", "pools:\n  - name: a\n    rate: .nan\n", []string{"pools.yaml:3:", "finite number"}},
		{"list as value", "pools:\n  - name: [a]\n", []string{"pools.yaml:2:", "name must be a string"}},
		{"bad duration", "pools:\n  - name: a\n    concurrency: 1\n    default_ttl: 15\n", []string{"pools.yaml:4:", "default_ttl must be a duration"}},
		{"negative duration", "pools:\n  - name: a\n    concurrency: 1\n    max_ttl: -5m\n", []string{"pools.yaml:4:", "negative"}},
		{"ttl out of range", "pools:\n  - name: a\n    concurrency: 1\n    max_ttl: 48h\n", []string{"pools.yaml:2:", "max_lease_ttl"}},
		{"duplicate key", "pools:\n  - name: a\n    concurrency: 1\n    concurrency: 2\n", []string{"pools.yaml:4:", "twice"}},
		{"duplicate pool", "pools:\n  - name: a\n    concurrency: 1\n  - name: a\n    rate: 1\n", []string{"pools.yaml:4:", `"a" is declared twice (first at line 2)`}},
		{"bad yaml", "pools:\n  - name: a\n   concurrency: 1\n", []string{"pools.yaml"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeFile(t, c.content))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// A pools file declares active and passive pools by kind and selection;
// bad values are refused with the line.
func TestPoolsFileResourceKinds(t *testing.T) {
	pools, err := Parse("p.yaml", []byte("pools:\n  - name: db\n    kind: active\n    selection: spread\n  - name: gpu\n    kind: passive\n"))
	if err != nil {
		t.Fatal(err)
	}
	if pools[0].ResourceKind != limiter.ResourceActive || pools[0].Selection != limiter.SelectSpread || pools[1].ResourceKind != limiter.ResourcePassive {
		t.Fatalf("pools = %+v", pools)
	}
	for _, bad := range []string{"pools:\n  - name: db\n    kind: lots\n", "pools:\n  - name: db\n    kind: active\n    selection: random\n"} {
		if _, err := Parse("p.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "p.yaml:3") && !strings.Contains(err.Error(), "p.yaml:4") {
			t.Errorf("Parse(%q) = %v; want an error with the line", bad, err)
		}
	}
}

// The pools file takes the API's field names and enum values as well as
// the short ones, and reports a key it does not know with its line, at
// any depth.
func TestPoolsFileCanonicalNames(t *testing.T) {
	short, err := Parse("p.yaml", []byte("pools:\n  - name: db\n    concurrency: 3\n    default_ttl: 1.5s\n    max_ttl: 90m\n    kind: active\n    selection: spread\n    revocation_policy: revoke\n    adaptive: {target: concurrency}\n"))
	if err != nil {
		t.Fatal(err)
	}
	long, err := Parse("p.yaml", []byte(`pools:
  - name: db
    concurrency_limit: 3
    default_lease_ttl: 1.5s
    maxLeaseTtl: 90m
    resource_kind: RESOURCE_KIND_ACTIVE
    selection_policy: SPREAD
    revocation_policy: REVOCATION_POLICY_REVOKE
    adaptive:
      enabled: true
      target: ADAPTIVE_TARGET_CONCURRENCY
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(short) != 1 || len(long) != 1 || !short[0].Equal(long[0]) {
		t.Fatalf("short keys gave %+v, API names %+v", short, long)
	}
	if c := long[0]; c.ConcurrencyLimit != 3 || c.DefaultLeaseTTL != 1500*time.Millisecond || c.MaxLeaseTTL != 90*time.Minute ||
		c.ResourceKind != limiter.ResourceActive || c.Selection != limiter.SelectSpread || c.RevocationPolicy != limiter.RevocationRevoke ||
		!c.Adaptive.Enabled || c.Adaptive.Target != limiter.AdaptConcurrency {
		t.Fatalf("pool = %+v", c)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"pools:\n  - name: db\n    concurrency: 1\n    adaptive:\n      enabled: true\n      windw: 5s\n", `p.yaml:6: unknown field "windw" in adaptive`},
		{"pools:\n  - name: db\n    concurrency: 1\n    create_time: 2024-01-01T00:00:00Z\n", `p.yaml:4: unknown field "create_time"`},
		{"pools:\n  - name: db\n    concurrency: 1\n    concurrency_limit: 2\n", `p.yaml:4: key "concurrency_limit" is given twice`},
		{"pools:\n  - name: db\n    concurrency: 1\n    resource_kind: RESOURCE_KIND_NONE\n", "p.yaml:4: resource_kind must be free, active or passive"},
	} {
		if _, err := Parse("p.yaml", []byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v; want %q", bad.yaml, err, bad.want)
		}
	}
}
