// Command worker is the workload of hatest's fault tests: it holds leases
// and takes rate tokens through the Go client, changes pools' config, and
// writes what it saw as JSON lines of hatest.Record to stdout, until its
// stdin closes. Its Workload comes from the environment
// (hatest.WorkloadEnv).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/hatest"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	wl, err := hatest.LoadWorkload()
	if err != nil {
		return err
	}
	out := &output{enc: json.NewEncoder(os.Stdout), worker: wl.Worker}
	c, err := client.Dialer{ClientID: wl.Worker, SafetyMargin: wl.Margin, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), GRPCOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(out.intercept)}}.Dial(wl.Servers...)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n := uint64(0)
	rng := func() *rand.Rand { n++; return rand.New(rand.NewPCG(wl.Seed, n)) }
	for _, h := range wl.Holds {
		for range h.Goroutines {
			w := holder{c: c, out: out, spec: h, margin: wl.Margin, rng: rng()}
			wg.Go(func() { w.run(ctx) })
		}
	}
	for _, tk := range wl.Takes {
		for range tk.Goroutines {
			wg.Go(func() { take(ctx, c, out, tk.Pool) })
		}
	}
	if len(wl.Config) > 0 {
		r := rng()
		wg.Go(func() { configure(ctx, c, out, wl.Config, wl.ConfigEvery, r) })
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	stop()
	wg.Wait()
	return c.Close()
}

// output writes records to stdout, one JSON line each.
type output struct {
	mu     sync.Mutex
	enc    *json.Encoder
	worker string
}

func (o *output) emit(r hatest.Record) {
	r.Worker = o.worker
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.enc.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "worker: writing a record:", err)
		os.Exit(1)
	}
}

// holder acquires, holds and releases leases on one pool in a loop.
type holder struct {
	c      *client.Client
	out    *output
	spec   hatest.HoldSpec
	margin time.Duration
	rng    *rand.Rand
	n      int
}

func (h *holder) run(ctx context.Context) {
	for ctx.Err() == nil {
		h.once(ctx)
	}
}

func (h *holder) once(ctx context.Context) {
	called := time.Now()
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	l, err := h.c.Acquire(actx, h.spec.Pool, client.WithTTL(h.spec.TTL), client.WithWeight(1+h.rng.Int64N(h.spec.MaxWeight)))
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.out.emit(hatest.Record{Kind: hatest.KindRefused, Pool: h.spec.Pool, Called: hatest.Nanos(called), Start: hatest.Nanos(time.Now()), Op: reasonOf(err)})
		}
		pause(ctx) // nothing held; do not spin while no server answers
		return
	}
	granted := time.Now()
	h.n++
	d := between(h.rng, h.spec.MinHold, h.spec.MaxHold)
	if h.spec.LongEvery > 0 && h.n%h.spec.LongEvery == 0 {
		d = between(h.rng, h.spec.LongMin, h.spec.LongMax)
	}
	t := time.NewTimer(d)
	lost := false
	select {
	case <-l.Done(): // lost: the client says so
		lost = ctx.Err() == nil
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	end := time.Now()
	// By the lease rule the hold is over at the local deadline, even if
	// the client's keep-alive has not said so yet.
	if dl := l.Expiry().Add(-h.margin); dl.Before(end) {
		end = dl
	}
	if end.Before(granted) {
		end = granted
	}
	var ids []string
	for _, r := range l.Resources() {
		ids = append(ids, r.ID)
	}
	h.out.emit(hatest.Record{Kind: hatest.KindHold, Pool: h.spec.Pool, Token: l.FencingToken(), Weight: l.Weight(), Instances: ids,
		Called: hatest.Nanos(called), Start: hatest.Nanos(granted), End: hatest.Nanos(end), Lost: lost})
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	_ = l.Release(rctx) // the hold ended at end whatever the answer
	rcancel()
}

func take(ctx context.Context, c *client.Client, out *output, pool string) {
	for ctx.Err() == nil {
		called := time.Now()
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Take(tctx, pool, 1)
		cancel()
		if err != nil {
			pause(ctx)
			continue
		}
		out.emit(hatest.Record{Kind: hatest.KindTake, Pool: pool, Weight: 1, Called: hatest.Nanos(called), Start: hatest.Nanos(time.Now())})
	}
}

// configure sets a new concurrency limit on one of pools every period,
// in turn, and reports each attempt and whether it was acknowledged. In a
// cluster of shards, an attempt answered NOT_LEADER (nothing applied) is
// sent to the server the answer names, the owner of the pool's shard (the
// client routes its own calls, not those on its Conn()).
func configure(ctx context.Context, c *client.Client, out *output, pools []string, every time.Duration, rng *rand.Rand) {
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	owners := map[string]tollgatev1.AdminServiceClient{} // a pool's last named owner
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	update := func(ctx context.Context, req *tollgatev1.UpdatePoolRequest) error {
		to := adm
		if o, ok := owners[req.GetPool().GetName()]; ok {
			to = o
		}
		for range 3 {
			_, err := to.UpdatePool(ctx, req)
			e, ok := client.FromError(err)
			if !ok || e.Reason != "NOT_LEADER" || e.Metadata["leader"] == "" {
				return err
			}
			leader := e.Metadata["leader"]
			cc, ok := conns[leader]
			if !ok {
				if cc, err = grpc.NewClient(leader, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
					return err
				}
				conns[leader] = cc
			}
			to = tollgatev1.NewAdminServiceClient(cc)
			owners[req.GetPool().GetName()] = to
		}
		_, err := to.UpdatePool(ctx, req)
		return err
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pool, limit := pools[seq%len(pools)], 1+rng.Int64N(100)
		called := time.Now()
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := update(uctx, &tollgatev1.UpdatePoolRequest{
			Pool:       &tollgatev1.Pool{Name: pool, ConcurrencyLimit: limit},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"concurrency_limit"}},
		})
		cancel()
		out.emit(hatest.Record{Kind: hatest.KindConfig, Pool: pool, Seq: seq, Limit: limit, Acked: err == nil,
			Called: hatest.Nanos(called), Start: hatest.Nanos(time.Now())})
	}
}

// reasonOf is an acquire's error in a word: its reason, else its code.
func reasonOf(err error) string {
	if e, ok := client.FromError(err); ok {
		if e.Reason != "" {
			return string(e.Reason)
		}
		return e.Code.String()
	}
	return "error"
}

func pause(ctx context.Context) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// intercept watches the Session stream: every acquire, renew and take
// answered becomes an answer record naming the server that gave it.
func (o *output) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &watched{ClientStream: cs, out: o, takes: map[uint64]string{}}, nil
}

type watched struct {
	grpc.ClientStream
	out   *output
	mu    sync.Mutex
	takes map[uint64]string // request id → pool, for takes in flight
}

// renewing is when each lease's renew in flight was first sent, on any
// stream: a renew answered NOT_LEADER is sent again to the new owner, and
// its answer's Called is the first send.
var renewing struct {
	sync.Mutex
	sent map[string]int64 // pool + "/" + lease id → first send
}

func (w *watched) SendMsg(m any) error {
	if req, ok := m.(*tollgatev1.SessionRequest); ok {
		reqs := []*tollgatev1.SessionRequest{req}
		if b := req.GetBatch(); b != nil {
			reqs = b.GetRequests()
		}
		now := hatest.Nanos(time.Now())
		for _, r := range reqs {
			switch {
			case r.GetTake() != nil:
				w.mu.Lock()
				w.takes[r.GetRequestId()] = r.GetTake().GetPool()
				w.mu.Unlock()
			case r.GetRenew() != nil:
				key := r.GetRenew().GetPool() + "/" + r.GetRenew().GetLeaseId()
				renewing.Lock()
				if renewing.sent == nil {
					renewing.sent = map[string]int64{}
				}
				if _, ok := renewing.sent[key]; !ok {
					renewing.sent[key] = now
				}
				renewing.Unlock()
			}
		}
	}
	return w.ClientStream.SendMsg(m)
}

func (w *watched) RecvMsg(m any) error {
	if err := w.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	at := time.Now()
	resp, ok := m.(*tollgatev1.SessionResponse)
	if !ok {
		return nil
	}
	if b := resp.GetBatch(); b != nil { // each answer of a batch as if it came alone
		for _, r := range b.GetResponses() {
			w.answer(r, at)
		}
		return nil
	}
	w.answer(resp, at)
	return nil
}

// answer records one answer received at at.
func (w *watched) answer(resp *tollgatev1.SessionResponse, at time.Time) {
	w.mu.Lock()
	takePool, isTake := w.takes[resp.GetRequestId()]
	if isTake {
		delete(w.takes, resp.GetRequestId())
	}
	w.mu.Unlock()
	var op string
	var lease *tollgatev1.Lease
	switch {
	case resp.GetAcquire() != nil:
		op, lease = "acquire", resp.GetAcquire().GetLease()
	case resp.GetRenew() != nil:
		op, lease = "renew", resp.GetRenew().GetLease()
	case resp.GetTake() != nil && isTake:
		op = "take"
	default:
		return
	}
	rec := hatest.Record{Kind: hatest.KindAnswer, Op: op, Pool: takePool, Start: hatest.Nanos(at)}
	if lease != nil {
		rec.Pool = lease.GetPool()
		rec.Decided = hatest.Nanos(lease.GetExpireTime().AsTime().Add(-lease.GetTtl().AsDuration()))
	}
	if op == "renew" {
		key := lease.GetPool() + "/" + lease.GetId()
		renewing.Lock()
		rec.Called = renewing.sent[key]
		delete(renewing.sent, key)
		renewing.Unlock()
	}
	if p, ok := peer.FromContext(w.Context()); ok && p.Addr != nil {
		rec.Server = p.Addr.String()
	}
	w.out.emit(rec)
}
