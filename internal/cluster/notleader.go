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

// NotLeader is the answer of a server that does not lead, as v describes
// its cluster: UNAVAILABLE (NOT_LEADER), with the leader's address and
// epoch in the ErrorInfo's metadata, and a RetryInfo of 100 ms. The delay
// is short also while no other leader is known: a hand-off has a
// successor leading within about that long, and a client that tries too
// soon is only answered NOT_LEADER again.
func NotLeader(v View) error {
	const retry = 100 * time.Millisecond
	msg := fmt.Sprintf("this server (%s) does not lead the cluster; send the call to the leader, %s (epoch %d)", v.Self, v.Leader, v.Epoch)
	if v.Leader == "" || v.Leader == v.Self {
		msg = fmt.Sprintf("this server (%s) does not lead the cluster and no other leader is known yet; retry in a moment", v.Self)
	}
	st := status.New(codes.Unavailable, msg)
	info := &errdetails.ErrorInfo{Reason: string(apierr.ReasonNotLeader), Domain: refuse.Domain,
		Metadata: map[string]string{"leader": v.Leader, "epoch": strconv.FormatInt(v.Epoch, 10)}}
	if d, err := st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}
