// Package hatest is the external checker and fault harness for Tollgate's
// several-server (HA) mode: worker processes that hold leases through the
// Go client and report every hold, take and config change as a Record;
// a checker that finds overlaps beyond a pool's limit, instances held
// twice, fencing tokens out of order and lost config changes; and the
// faults: a TCP proxy that can blackhole a link, and control of server
// processes (kill -9, SIGSTOP/SIGCONT, SIGTERM). It is imported only by
// tests.
package hatest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Kinds of Record.
const (
	// KindHold is one lease, from its grant to its end by the holder's
	// rule (released, lost, or its local deadline, whichever came first).
	KindHold = "hold"
	// KindTake is one Take of rate tokens, answered.
	KindTake = "take"
	// KindConfig is one UpdatePool attempt, acknowledged or not.
	KindConfig = "config"
	// KindAnswer is one answer read off a Session stream (op acquire,
	// renew or take), with the server that gave it: for measuring
	// recovery.
	KindAnswer = "answer"
	// KindEvent is one event a server published (WatchEvents), seen by
	// an Observer: Op is its type, Token the lease's fencing token (lease
	// events), Decided its time by the server's clock (for lease_expired,
	// the lease's expiry), Start when it was received.
	KindEvent = "event"
	// KindRefused is one acquire that was not granted (its error, or its
	// 2 s timeout): Called when it was made, Start when it gave up, Op the
	// error's reason or code.
	KindRefused = "refused"
	// KindHealth is one health check of a server by an Observer: Op is
	// the status ("SERVING", "NOT_SERVING", or "error"), Called when it
	// was asked, Start when it was answered.
	KindHealth = "health"
)

// Record is one thing a worker saw. Times are wall-clock Unix nanoseconds
// of the worker's host (the checker and the workers share one machine).
type Record struct {
	Kind   string `json:"kind"`
	Worker string `json:"worker"`
	Pool   string `json:"pool"`

	// Holds.
	Token     uint64   `json:"token,omitempty"`
	Weight    int64    `json:"weight,omitempty"`
	Instances []string `json:"instances,omitempty"`

	// Called is when the request was made; Start when it was answered
	// (for a hold, the grant); End when a hold ended.
	Called int64 `json:"called,omitempty"`
	Start  int64 `json:"start,omitempty"`
	End    int64 `json:"end,omitempty"`
	// Lost: the client ended the hold (its lease was lost) before its
	// holder was done with it.
	Lost bool `json:"lost,omitempty"`

	// Config changes: the concurrency limit asked for, whether the change
	// was acknowledged, and its place in the worker's attempts on Pool.
	Limit int64 `json:"limit,omitempty"`
	Acked bool  `json:"acked,omitempty"`
	Seq   int   `json:"seq,omitempty"`

	// Answers: the operation, the server's address, and (for acquire and
	// renew) when the server decided, by its clock: the lease's expiry
	// less its TTL. A renew's Called is when the client first sent it (a
	// renew answered NOT_LEADER is sent again to the server named).
	Op      string `json:"op,omitempty"`
	Server  string `json:"server,omitempty"`
	Decided int64  `json:"decided,omitempty"`
}

// Nanos is t as a Record time.
func Nanos(t time.Time) int64 { return t.UnixNano() }

// Time is a Record time as a time.Time.
func Time(n int64) time.Time { return time.Unix(0, n) }

// ReadRecords reads JSON lines of Records from r until EOF.
func ReadRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return out, fmt.Errorf("hatest: record %d: %w: %q", len(out)+1, err, sc.Text())
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}
