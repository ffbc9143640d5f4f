package suggest

import (
	"reflect"
	"strconv"
	"testing"
)

func TestNear(t *testing.T) {
	names := []string{"orders-db", "orders-dbs", "billing", "weight", "wait-timeout", "gpu"}
	for _, c := range []struct {
		word string
		want []string
	}{
		{"order-db", []string{"orders-db", "orders-dbs"}},
		{"weigth", []string{"weight"}}, // a swap is one edit
		{"Billing", []string{"billing"}},
		{"gpx", []string{"gpu"}},
		{"orders-db", []string{"orders-dbs"}}, // not itself
		{"zzzzzzzz", []string{}},
		{"", []string{}},
	} {
		if got := Near(c.word, names); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Near(%q) = %q, want %q", c.word, got, c.want)
		}
	}
}

func TestNearReturnsAtMostMaxNames(t *testing.T) {
	var names []string
	for i := range 20 {
		names = append(names, "pool-"+strconv.Itoa(i))
	}
	if got := Near("pool-x", names); len(got) != MaxNames {
		t.Fatalf("Near = %q", got)
	}
}

func TestHint(t *testing.T) {
	q := strconv.Quote
	if got := Hint(nil, q); got != "" {
		t.Errorf("Hint(nil) = %q", got)
	}
	if got := Hint([]string{"a"}, q); got != ` (did you mean "a"?)` {
		t.Errorf("one: %q", got)
	}
	if got := Hint([]string{"a", "b", "c"}, q); got != ` (did you mean "a", "b" or "c"?)` {
		t.Errorf("three: %q", got)
	}
}
