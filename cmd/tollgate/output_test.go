package main

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// A Pool field pool get has no row of its own for is printed as it is, so
// that a new field shows without code in the printer.
func TestPoolOutputPrintsOtherFields(t *testing.T) {
	delete(formattedPoolFields, "selection_policy")
	defer func() { formattedPoolFields["selection_policy"] = true }()
	var out strings.Builder
	pool := &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2, SelectionPolicy: tollgatev1.SelectionPolicy_SELECTION_POLICY_SPREAD}
	if err := (&printer{w: &out}).pool(pool, pool, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nselection_policy:") || !strings.Contains(out.String(), " spread\n") {
		t.Fatalf("output lacks the field:\n%s", out.String())
	}
}

// -o json of every command is the HTTP API's style: one line, snake_case
// keys, numbers as numbers (64-bit ones too), zeros written, no doubled
// spaces; protojson reads it back.
func TestJSONOutputStyle(t *testing.T) {
	ts := newCLIServer(t)
	ts.pool(t, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 5, Description: "the  db"})
	r := runCLI(t, ts.addr, "pool", "get", "db", "-o", "json").mustSucceed(t)
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("not one line:\n%s", r.stdout)
	}
	var tree struct {
		Pool   map[string]any `json:"pool"`
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tree); err != nil {
		t.Fatal(err)
	}
	if v, ok := tree.Pool["concurrency_limit"].(float64); !ok || v != 5 {
		t.Errorf("pool.concurrency_limit = %#v, want the number 5:\n%s", tree.Pool["concurrency_limit"], r.stdout)
	}
	if v, ok := tree.Status["held"].(float64); !ok || v != 0 {
		t.Errorf("status.held = %#v, want the number 0:\n%s", tree.Status["held"], r.stdout)
	}
	if tree.Pool["default_lease_ttl"] == nil || tree.Pool["defaultLeaseTtl"] != nil {
		t.Errorf("keys are not snake_case:\n%s", r.stdout)
	}
	if strings.Contains(strings.ReplaceAll(r.stdout, "the  db", ""), "  ") {
		t.Errorf("doubled spaces:\n%s", r.stdout)
	}
	var back tollgatev1.GetPoolResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &back); err != nil || back.GetPool().GetDescription() != "the  db" {
		t.Fatalf("protojson does not read it back (%v):\n%s", err, r.stdout)
	}
}
