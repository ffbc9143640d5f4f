package pagetoken

import (
	"strconv"
	"testing"

	"github.com/tollgate/tollgate/internal/errtest"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// FuzzPageTokens: a page token of ListPools or GetStats (a pool name) or of
// ListLeases or ListClients (a number) either decodes to what it encodes,
// or is refused as INVALID_ARGUMENT.
func FuzzPageTokens(f *testing.F) {
	f.Fuzz(func(t *testing.T, tok string) {
		if name, err := Pool(tok); err != nil {
			errtest.WantCodes(t, err, apierr.CodeInvalidArgument)
		} else if tok != "" {
			if limiter.ValidatePoolName(name) != nil {
				t.Fatalf("page token %q decoded to %q, not a pool name", tok, name)
			}
			if back, err := Pool(Encode(name)); err != nil || back != name {
				t.Fatalf("page token of %q decoded to %q, %v", name, back, err)
			}
		}
		if n, err := Number(tok, "ListLeases"); err != nil {
			errtest.WantCodes(t, err, apierr.CodeInvalidArgument)
		} else if tok != "" {
			again := Encode(strconv.FormatUint(n, 10))
			if back, err := Number(again, "ListClients"); err != nil || back != n {
				t.Fatalf("page token of %d decoded to %d, %v", n, back, err)
			}
		}
	})
}
