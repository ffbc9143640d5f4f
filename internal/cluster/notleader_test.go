package cluster

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A follower names the leader and its epoch and asks for a quick retry;
// with no other leader known it names none.
func TestNotLeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		view   View
		retry  time.Duration
		inMsg  string
		leader string
	}{
		{"follower", View{Self: "b:1", Leader: "a:1", Epoch: 7}, 100 * time.Millisecond, "send the call to the leader, a:1 (epoch 7)", "a:1"},
		{"no leader", View{Self: "b:1"}, 100 * time.Millisecond, "no other leader is known yet", ""},
		{"itself, past its deadline", View{Self: "a:1", Leader: "a:1", Epoch: 7}, 100 * time.Millisecond, "no other leader is known yet", "a:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(NotLeader(tc.view))
			if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), tc.inMsg) {
				t.Fatalf("got %v %q; want UNAVAILABLE saying %q", st.Code(), st.Message(), tc.inMsg)
			}
			var info *errdetails.ErrorInfo
			var retry *errdetails.RetryInfo
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.ErrorInfo:
					info = d
				case *errdetails.RetryInfo:
					retry = d
				}
			}
			if info == nil || info.GetReason() != string(apierr.ReasonNotLeader) || info.GetDomain() != refuse.Domain ||
				info.GetMetadata()["leader"] != tc.leader || info.GetMetadata()["epoch"] != strconv.FormatInt(tc.view.Epoch, 10) {
				t.Fatalf("ErrorInfo %v", info)
			}
			if retry == nil || retry.GetRetryDelay().AsDuration() != tc.retry {
				t.Fatalf("RetryInfo %v; want a retry after %v", retry, tc.retry)
			}
		})
	}
}
