package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tollgate/tollgate/client"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// queueReport is told where a waiting acquire stands in its pool's queue.
type queueReport func(position, waiting int64)

// watchQueue asks every interval where c's acquire waits in pool's queue
// and tells report when that changed, until ctx ends. A server that cannot
// say (an older one, or a refusal) ends the watch quietly: the acquire
// waits on regardless.
func watchQueue(ctx context.Context, c *client.Client, pool string, timeout, interval time.Duration, report queueReport) {
	lim := tollgatev1.NewLimiterServiceClient(c.Conn())
	t := time.NewTimer(interval / 4) // soon: a grant at once needs no report
	defer t.Stop()
	var last [2]int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := lim.GetQueuePosition(qctx, &tollgatev1.GetQueuePositionRequest{Pool: pool, ClientId: c.ClientID()})
		cancel()
		if err != nil && ctx.Err() == nil {
			return
		}
		if q := resp.GetAcquires(); len(q) > 0 && ctx.Err() == nil {
			if now := [2]int64{q[0].GetPosition(), resp.GetWaiting()}; now != last {
				last = now
				report(now[0], now[1])
			}
		}
		t.Reset(interval)
	}
}

// printQueue returns the report that acquire and run print: a line of text
// on errOut, or with -o json a JSON object per line on out.
func printQueue(out, errOut io.Writer, asJSON bool, pool string) queueReport {
	return func(position, waiting int64) {
		if asJSON {
			_ = json.NewEncoder(out).Encode(map[string]any{"event": "waiting", "pool": pool, "position": position, "waiting": waiting})
			return
		}
		fmt.Fprintf(errOut, "waiting in pool %q's queue: position %d of %d\n", pool, position, waiting)
	}
}
