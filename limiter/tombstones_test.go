package limiter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestTombstonesMissingErr: a lease that is not live is explained by how
// it ended, as far as the pool remembers.
func TestTombstonesMissingErr(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	var ts tombstones
	ts.add(3, EndExpired, at)
	ts.addMsg(4, EndRevoked, at, "stuck job (by alice)")
	for _, c := range []struct {
		token uint64
		want  error
		says  string
	}{
		{3, apierr.ErrLeaseExpired, "expired at"},
		{4, apierr.ErrLeaseRevoked, "stuck job (by alice)"},
		{5, apierr.ErrLeaseNotFound, "released, or it ended long ago"},
		{11, apierr.ErrLeaseNotFound, "never issued lease 11 (its newest is 10)"},
	} {
		err := ts.missingErr("p", c.token, 10)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("token %d: %v, want %v saying %q", c.token, err, c.want, c.says)
		}
	}
	for i := range uint64(tombstoneCap) { // the oldest are forgotten
		ts.add(100+i, EndExpired, at)
	}
	if _, ok := ts.lookup(3); ok {
		t.Fatal("a tombstone past the cap is remembered")
	}
}
