package hatest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgate/tollgate/internal/events"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// HealthEvery is how often an Observer asks each server for its health.
const HealthEvery = 10 * time.Millisecond

// Observer watches every server of a cluster from outside, as operators
// and balancers do: the events each publishes (WatchEvents, asked again
// of each server whenever it refuses or its stream ends, with the recent
// events; and at Stop, the recent events each running server lists on
// GET /api/events, which a follower answers too, so that those published
// while no watch was open are seen) and its gRPC health for
// tollgate.v1.LimiterService, sampled every HealthEvery. Stop returns what
// it saw as Records (KindEvent, KindHealth), for Check.
type Observer struct {
	servers []*Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped sync.Once

	mu   sync.Mutex
	recs []Record
	seen map[string]bool // events already recorded: server, seq, type, time
}

// Observe starts observing servers.
func Observe(t testing.TB, servers ...*Server) *Observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := &Observer{servers: servers, cancel: cancel, seen: map[string]bool{}}
	for _, s := range servers {
		addr := s.Addr
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		o.wg.Add(2)
		go o.watchEvents(ctx, addr, cc)
		go o.sampleHealth(ctx, addr, cc)
	}
	t.Cleanup(func() { o.Stop() })
	return o
}

// Stop stops observing and returns what was seen. It may be called more
// than once.
func (o *Observer) Stop() []Record {
	o.cancel()
	o.wg.Wait()
	o.stopped.Do(func() {
		for _, s := range o.servers {
			if s.Running() {
				o.recentEvents(s)
			}
		}
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Record(nil), o.recs...)
}

func (o *Observer) add(r Record) {
	o.mu.Lock()
	o.recs = append(o.recs, r)
	o.mu.Unlock()
}

// watchEvents records the events of the server at addr until ctx ends.
func (o *Observer) watchEvents(ctx context.Context, addr string, cc *grpc.ClientConn) {
	defer o.wg.Done()
	adm := tollgatev1.NewAdminServiceClient(cc)
	for ctx.Err() == nil {
		st, err := adm.WatchEvents(ctx, &tollgatev1.WatchEventsRequest{IncludeRecent: true})
		for err == nil {
			var resp *tollgatev1.WatchEventsResponse
			if resp, err = st.Recv(); err == nil {
				o.event(addr, resp.GetEvent())
			}
		}
		sleep(ctx, 50*time.Millisecond) // a follower refuses at once: ask again soon, not in a spin
	}
}

// event records ev, received from the server at addr: the server that
// recorded it, which in a cluster may be another (a watch of one server
// carries every server's events, each naming its own).
func (o *Observer) event(addr string, ev *tollgatev1.PoolEvent) {
	server := ev.GetServer()
	if server == "" {
		server = addr
	}
	o.record(server, ev.GetSeq(), ev.GetType(), ev.GetPool(), ev.GetLeaseId(), ev.GetTime().AsTime())
}

// recentEvents records the recent events s lists over HTTP (bounded by
// two seconds; a server that does not answer lists nothing).
func (o *Observer) recentEvents(s *Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr+"/api/events", nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var body struct {
		Events []events.Event `json:"events"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&body) != nil {
		return
	}
	for _, ev := range body.Events {
		o.record(s.Addr, ev.Seq, ev.Type, ev.Pool, ev.LeaseID, ev.Time)
	}
}

// record records an event of server once, however often it was seen.
func (o *Observer) record(server string, seq uint64, typ, pool, leaseID string, at time.Time) {
	received := time.Now()
	key := server + " " + strconv.FormatUint(seq, 10) + " " + typ + " " + strconv.FormatInt(at.UnixNano(), 10)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return
	}
	o.seen[key] = true
	token, _ := strconv.ParseUint(leaseID, 10, 64)
	o.recs = append(o.recs, Record{Kind: KindEvent, Server: server, Pool: pool, Op: typ, Token: token,
		Decided: Nanos(at), Start: Nanos(received)})
}

// sampleHealth asks the server at addr for its health every HealthEvery
// until ctx ends, each call bounded by a second.
func (o *Observer) sampleHealth(ctx context.Context, addr string, cc *grpc.ClientConn) {
	defer o.wg.Done()
	h := healthpb.NewHealthClient(cc)
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		sent := time.Now()
		resp, err := h.Check(cctx, &healthpb.HealthCheckRequest{Service: tollgatev1.LimiterService_ServiceDesc.ServiceName})
		answered := time.Now()
		cancel()
		st := resp.GetStatus().String()
		if err != nil {
			st = "error"
		}
		if ctx.Err() == nil {
			o.add(Record{Kind: KindHealth, Server: addr, Op: st, Called: Nanos(sent), Start: Nanos(answered)})
		}
		sleep(ctx, HealthEvery)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// EventsAfter returns the events about pools that server published with
// a time at or after t (by its clock): a server whose term ended by t must
// publish none.
func EventsAfter(recs []Record, server string, t time.Time) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == KindEvent && r.Server == server && r.Pool != "" && r.Decided >= Nanos(t) {
			out = append(out, r)
		}
	}
	return out
}
