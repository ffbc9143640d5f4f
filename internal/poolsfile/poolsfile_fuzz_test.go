package poolsfile

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// seedTime is when the fuzzed pools are seeded.
var seedTime = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// FuzzParsePools: a pools file either fails with an error that names the
// file, or declares pools that each validate, have distinct names, and can
// be seeded into a data directory (as the server does on its first start).
func FuzzParsePools(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		pools, err := Parse("pools.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "pools.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		names := make(map[string]bool, len(pools))
		for _, c := range pools {
			if err := c.Validate(); err != nil {
				t.Fatalf("pool %q loaded but does not validate: %v", c.Name, err)
			}
			if names[c.Name] {
				t.Fatalf("pool %q loaded twice", c.Name)
			}
			names[c.Name] = true
			if _, err := limiter.NewSavedPool(c, seedTime); err != nil {
				t.Fatalf("pool %q loaded but cannot be seeded: %v", c.Name, err)
			}
		}
	})
}
