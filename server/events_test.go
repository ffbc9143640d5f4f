package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testwait"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// logBuffer collects JSON log records safely across goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the records whose message starts with msg.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := rec["msg"].(string); strings.HasPrefix(m, msg) {
			out = append(out, rec)
		}
	}
	return out
}

// Lease ends and pool changes are logged with the pool, the lease id, the
// client id, the description and who made the change.
func TestEventLogs(t *testing.T) {
	logs := &logBuffer{}
	o := startOps(t, Config{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Auth: &auth.Config{AdminToken: "tok-0123456789abcdef"}}, nil)
	e := o.env(withToken("tok-0123456789abcdef"))
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 3})
	if _, err := e.adm.UpdatePool(e.ctx(), &tollgatev1.UpdatePoolRequest{
		Pool:       &tollgatev1.Pool{Name: "db", ConcurrencyLimit: 5},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
	}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "w1", Description: "backfill", Ttl: dur(time.Second)})
	e.acquire(&tollgatev1.AcquireRequest{Pool: "db", ClientId: "w2", Description: "report"})
	o.clock.Advance(2 * time.Second)
	testwait.For(t, "the expiry", func() bool { return len(logs.records(t, "lease expired")) == 1 })
	if _, err := e.adm.DeletePool(e.ctx(), &tollgatev1.DeletePoolRequest{Name: "db", Force: true}); err != nil {
		t.Fatal(err)
	}

	want := func(msg string, fields map[string]any) {
		t.Helper()
		recs := logs.records(t, msg)
		if len(recs) != 1 {
			t.Fatalf("%d records %q, want 1", len(recs), msg)
		}
		for k, v := range fields {
			if recs[0][k] != v {
				t.Errorf("record %q: %s = %v, want %v (record %v)", msg, k, recs[0][k], v, recs[0])
			}
		}
	}
	want("pool created", map[string]any{"pool": "db", "by": "admin-token", "level": "INFO"})
	want("pool updated", map[string]any{"pool": "db", "detail": "concurrency_limit=5"})
	want("lease expired", map[string]any{"pool": "db", "lease_id": "1", "client_id": "w1", "description": "backfill"})
	want("lease ended by the server", map[string]any{"pool": "db", "lease_id": "2", "client_id": "w2", "description": "report"})
	want("pool deleted", map[string]any{"pool": "db", "detail": "force"})

	evs := o.srv.RecentEvents()
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, ","); got != "pool_deleted,lease_revoked,lease_expired,pool_updated,pool_created" {
		t.Fatalf("events newest first = %s", got)
	}
}
