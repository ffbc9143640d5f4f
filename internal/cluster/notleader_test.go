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

// A server that does not lead a shard names the shard's leader, its epoch
// and the shard, and asks for a quick retry; with no other leader known it
// names none; during a planned move it names the server the shard moves
// to.
func TestNotLeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		self   string
		owner  Owner
		retry  time.Duration
		inMsg  string
		leader string
		epoch  int64
	}{
		{"follower", "b:1", Owner{Shard: 3, Owner: "a:1", Epoch: 7}, 100 * time.Millisecond, "send the call to its leader, a:1 (epoch 7)", "a:1", 7},
		{"no leader", "b:1", Owner{Shard: 3}, 100 * time.Millisecond, "no other leader of it is known yet", "", 0},
		{"itself, past its deadline", "a:1", Owner{Shard: 3, Owner: "a:1", Epoch: 7}, 100 * time.Millisecond, "no other leader of it is known yet", "", 7},
		{"moving", "a:1", Owner{Shard: 3, Owner: "a:1", Epoch: 7, MovingTo: "c:1"}, 100 * time.Millisecond, "its leader, c:1 (epoch 0)", "c:1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(NotLeader(tc.self, tc.owner))
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
				info.GetMetadata()["leader"] != tc.leader || info.GetMetadata()["epoch"] != strconv.FormatInt(tc.epoch, 10) || info.GetMetadata()["shard"] != "3" {
				t.Fatalf("ErrorInfo %v", info)
			}
			if retry == nil || retry.GetRetryDelay().AsDuration() != tc.retry {
				t.Fatalf("RetryInfo %v; want a retry after %v", retry, tc.retry)
			}
		})
	}
}
