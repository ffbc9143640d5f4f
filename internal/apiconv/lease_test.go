package apiconv

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/leaseid"
	"github.com/tollgate/tollgate/limiter"
)

// A holder whose lease was revoked because its instance left with its
// provider is told to stop, and not that its permits are back in the pool:
// they left it.
func TestLeaseEventRevokedByProviderLoss(t *testing.T) {
	ids := leaseid.New([]byte("0123456789abcdef0123456789abcdef"))
	ev := limiter.LeaseEnded{
		Lease:   limiter.Lease{Pool: "gpu", FencingToken: 3, Weight: 1},
		Reason:  limiter.EndRevoked,
		Message: `its instance "gpu-1" left pool "gpu" with its provider "w-1": connection lost`,
	}
	got := LeaseEventToProto(ids, ev).GetReason()
	if strings.Contains(got, "back in the pool") || !strings.Contains(got, `left pool "gpu" with its provider "w-1"`) || !strings.HasSuffix(got, "stop using it") {
		t.Fatalf("reason %q", got)
	}
}
