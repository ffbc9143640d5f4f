package poolsfile

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

func TestLoadPoolsFileMarks(t *testing.T) {
	path := writeFile(t, `pools:
  - name: gpu
    concurrency: 8
    overload_mark: 20
    near_full_mark: off
    low_utilisation_mark: 0.05
    low_utilisation_period: 30m
  - name: api
    rate: 10
    overload_mark: off
`)
	pools, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 2 {
		t.Fatalf("pools: %+v", pools)
	}
	if g := pools[0]; g.OverloadMark != 20 || g.NearFullMark != limiter.MarkOff || g.LowUtilisationMark != 0.05 || g.LowUtilisationPeriod != 30*time.Minute {
		t.Fatalf("gpu marks: %+v", g)
	}
	if a := pools[1]; a.OverloadMark != limiter.MarkOff || a.NearFullMark != 0 {
		t.Fatalf("api marks: %+v", a)
	}
	for _, tc := range []struct{ entry, want string }{
		{"near_full_mark: 1.5", "near_full_mark 1.5 is out of range"},
		{"overload_mark: lots", "overload_mark must be a whole number"},
		{"low_utilisation_period: soon", "low_utilisation_period must be a duration"},
	} {
		path := writeFile(t, "pools:\n  - name: p\n    concurrency: 1\n    "+tc.entry+"\n")
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "pools.yaml:") {
			t.Errorf("%s: error %v, want %q after the file and line", tc.entry, err, tc.want)
		}
	}
}
