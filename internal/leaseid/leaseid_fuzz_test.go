package leaseid

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/errtest"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fuzzIDKey is the lease id key of the fuzz targets.
var fuzzIDKey = []byte("0123456789abcdef0123456789abcdef")

// FuzzLeaseID: an id signed for a pool parses back to its number in that
// pool only, a lease id is never a share id nor the reverse, and any other
// id is refused as malformed (INVALID_ARGUMENT) or not found (NOT_FOUND),
// never accepted unless it carries the tag signed for its number.
func FuzzLeaseID(f *testing.F) {
	ids := New(fuzzIDKey)
	f.Fuzz(func(t *testing.T, pool string, n uint64, id string) {
		lease, share := ids.Format(pool, n), ids.FormatShare(pool, n)
		if got, err := ids.Parse(pool, lease); err != nil || got != n {
			t.Fatalf("Parse(%q, Format(%d)) = %d, %v", pool, n, got, err)
		}
		if got, err := ids.ParseShare(pool, share); err != nil || got != n {
			t.Fatalf("ParseShare(%q, FormatShare(%d)) = %d, %v", pool, n, got, err)
		}
		if got, err := ParseAdmin(lease); err != nil || got != n {
			t.Fatalf("ParseAdmin(%q) = %d, %v", lease, got, err)
		}
		if _, err := ids.Parse(pool+"x", lease); !errors.Is(err, apierr.ErrLeaseNotFound) {
			t.Fatalf("lease id %q of pool %q accepted in pool %q: %v", lease, pool, pool+"x", err)
		}
		if _, err := ids.Parse(pool, share); !errors.Is(err, apierr.ErrLeaseNotFound) {
			t.Fatalf("share id %q accepted as a lease id: %v", share, err)
		}
		if _, err := ids.ParseShare(pool, lease); !errtest.IsReason(err, apierr.ReasonShareNotFound) {
			t.Fatalf("lease id %q accepted as a share id: %v", lease, err)
		}

		if tok, err := ids.Parse(pool, id); err == nil {
			if _, tag, _ := strings.Cut(id, "."); tag != ids.tag(pool, tok) {
				t.Fatalf("Parse(%q, %q) accepted a tag not signed for %d", pool, id, tok)
			}
		} else {
			errtest.WantCodes(t, err, apierr.CodeInvalidArgument, apierr.CodeNotFound)
		}
		if _, err := ids.ParseShare(pool, id); err != nil {
			errtest.WantCodes(t, err, apierr.CodeInvalidArgument, apierr.CodeNotFound)
		}
		if _, err := ParseAdmin(id); err != nil {
			errtest.WantCodes(t, err, apierr.CodeInvalidArgument)
		}
	})
}
