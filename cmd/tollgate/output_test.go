package main

import (
	"strings"
	"testing"

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
