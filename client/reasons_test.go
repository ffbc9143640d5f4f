package client

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// TestEveryServerReasonHasASentinel checks the client's sentinels against
// the API's ErrorReason enum, the one list of what the server sends: one
// sentinel per reason, with the code the enum gives it.
func TestEveryServerReasonHasASentinel(t *testing.T) {
	byReason := make(map[string]*Error, len(serverErrors))
	for _, e := range serverErrors {
		if byReason[e.Reason] != nil {
			t.Errorf("two sentinels for %s", e.Reason)
		}
		byReason[e.Reason] = e
	}
	vals := tollgatev1.ErrorReason(0).Descriptor().Values()
	for i := range vals.Len() {
		v := vals.Get(i)
		if v.Number() == 0 {
			continue
		}
		reason := strings.TrimPrefix(string(v.Name()), "ERROR_REASON_")
		e := byReason[reason]
		if e == nil {
			t.Errorf("no client sentinel for %s", v.Name())
			continue
		}
		delete(byReason, reason)
		if code := proto.GetExtension(v.Options(), tollgatev1.E_GrpcCode).(string); CodeName(e.Code) != code {
			t.Errorf("sentinel of %s has code %s; the enum says %s", reason, CodeName(e.Code), code)
		}
	}
	for r := range byReason {
		t.Errorf("sentinel %s is not in the ErrorReason enum", r)
	}
}
