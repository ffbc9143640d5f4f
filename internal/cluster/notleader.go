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
	"github.com/tollgate/tollgate/limiter"
)

// NotLeader is the answer of a server that does not lead, as v describes
// its cluster: UNAVAILABLE (NOT_LEADER), with the leader's address and
// epoch in the ErrorInfo's metadata, and a RetryInfo saying when to retry
// (later when no other leader is known).
func NotLeader(v View) error {
	retry := 100 * time.Millisecond
	msg := fmt.Sprintf("this server (%s) does not lead the cluster; send the call to the leader, %s (epoch %d)", v.Self, v.Leader, v.Epoch)
	if v.Leader == "" || v.Leader == v.Self {
		retry = 500 * time.Millisecond
		msg = fmt.Sprintf("this server (%s) does not lead the cluster and no other leader is known yet; retry in a moment", v.Self)
	}
	st := status.New(codes.Unavailable, msg)
	info := &errdetails.ErrorInfo{Reason: string(limiter.ReasonNotLeader), Domain: refuse.Domain,
		Metadata: map[string]string{"leader": v.Leader, "epoch": strconv.FormatInt(v.Epoch, 10)}}
	if d, err := st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}
