package cluster

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// NotLeader is the answer of the server self when it does not lead the
// shard o describes: UNAVAILABLE (NOT_LEADER), with the shard's leader's
// address, its epoch and the shard in the ErrorInfo's metadata ("leader",
// "epoch", "shard"), and a RetryInfo of 100 ms. During a planned move the
// leader named is the server the shard moves to. The delay
// is short also while no other leader is known: a hand-off has a
// successor leading within about that long, and a client that tries too
// soon is only answered NOT_LEADER again.
func NotLeader(self string, o Owner) error {
	const retry = 100 * time.Millisecond
	leader, epoch := o.Owner, o.Epoch
	if o.MovingTo != "" {
		leader, epoch = o.MovingTo, 0
	}
	msg := fmt.Sprintf("this server (%s) does not lead shard %d; send the call to its leader, %s (epoch %d)", self, o.Shard, leader, epoch)
	if leader == "" || leader == self {
		leader = ""
		msg = fmt.Sprintf("this server (%s) does not lead shard %d and no other leader of it is known yet; retry in a moment", self, o.Shard)
	}
	st := status.New(codes.Unavailable, msg)
	info := &errdetails.ErrorInfo{Reason: string(apierr.ReasonNotLeader), Domain: refuse.Domain,
		Metadata: map[string]string{"leader": leader, "epoch": strconv.FormatInt(epoch, 10), "shard": strconv.Itoa(o.Shard)}}
	if d, err := st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}
