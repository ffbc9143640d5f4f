package main

import (
	"strings"
	"testing"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// On a cluster whose pools are on several servers the table says which
// leads each, and names the servers whose pools are missing; an event
// line names its server.
func TestStatsOwnerColumnAndMissing(t *testing.T) {
	var out strings.Builder
	p := &printer{w: &out}
	err := p.stats(&tollgatev1.GetStatsResponse{Stats: []*tollgatev1.PoolStats{
		{Pool: "a", Status: &tollgatev1.PoolStatus{Owner: "10.0.0.1:7070"}},
		{Pool: "b", Status: &tollgatev1.PoolStatus{Owner: "10.0.0.2:7070"}},
	}, Unreachable: []string{"10.0.0.3:7070"}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != 4 || !strings.HasPrefix(lines[0], "POOL  OWNER ") || !strings.HasPrefix(lines[2], "b     10.0.0.2:7070 ") ||
		lines[3] != "missing: the pools of 10.0.0.3:7070 (no answer within the timeout)" {
		t.Fatalf("stats: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := p.stats(&tollgatev1.GetStatsResponse{Stats: []*tollgatev1.PoolStats{{Pool: "a", Status: &tollgatev1.PoolStatus{Owner: "s:1"}}}}); err != nil || strings.Contains(out.String(), "OWNER") {
		t.Fatalf("one server's pools: %v\n%s", err, out.String())
	}
	if line := eventLine(&tollgatev1.PoolEvent{Type: "pool_created", Pool: "a", Server: "s:1"}); !strings.HasSuffix(line, "  on=s:1") {
		t.Fatalf("event line %q", line)
	}
}

// Sessions on several servers get a SERVER column.
func TestClientListServerColumn(t *testing.T) {
	var out strings.Builder
	p := &printer{w: &out}
	err := p.clients(&tollgatev1.ListClientsResponse{Clients: []*tollgatev1.ClientSession{
		{SessionId: "1", Server: "10.0.0.1:7070"}, {SessionId: "1", Server: "10.0.0.2:7070"},
	}, Unreachable: []string{"10.0.0.3:7070"}}, "")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != 4 || !strings.HasPrefix(lines[0], "SESSION  SERVER ") || !strings.HasPrefix(lines[2], "1        10.0.0.2:7070 ") ||
		lines[3] != "missing: the sessions of 10.0.0.3:7070 (no answer within the timeout)" {
		t.Fatalf("clients: %v\n%s", err, out.String())
	}
}

// pool list, too: an OWNER column when the pools are on several servers,
// and the servers whose pools are missing.
func TestPoolListOwnerColumnAndMissing(t *testing.T) {
	var out strings.Builder
	p := &printer{w: &out}
	err := p.pools(&tollgatev1.ListPoolsResponse{
		Pools:       []*tollgatev1.Pool{{Name: "a", ConcurrencyLimit: 2}, {Name: "b", ConcurrencyLimit: 3}},
		Statuses:    []*tollgatev1.PoolStatus{{Owner: "10.0.0.1:7070"}, {Owner: "10.0.0.2:7070", Held: 1}},
		Unreachable: []string{"10.0.0.3:7070"},
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME  OWNER          CONCURRENCY ") ||
		!strings.HasPrefix(lines[2], "b     10.0.0.2:7070  3            1 ") ||
		lines[3] != "missing: the pools of 10.0.0.3:7070 (no answer within the timeout)" {
		t.Fatalf("pool list: %v\n%s", err, out.String())
	}
	out.Reset()
	err = p.pools(&tollgatev1.ListPoolsResponse{Pools: []*tollgatev1.Pool{{Name: "a"}}, Statuses: []*tollgatev1.PoolStatus{{Owner: "s:1"}}})
	if err != nil || strings.Contains(out.String(), "OWNER") || !strings.HasPrefix(out.String(), "NAME  CONCURRENCY") {
		t.Fatalf("one server's pools: %v\n%s", err, out.String())
	}
}
