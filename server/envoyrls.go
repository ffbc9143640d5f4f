package server

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"time"

	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/envoyrls"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/internal/term"
	"github.com/tollgate/tollgate/limiter"
)

// registerEnvoyRLS registers Envoy's rate-limit service on r. A call is
// checked by the server's auth as a LimiterService call on each pool it
// matches, counts one request of the caller's request rate per
// descriptor, and the engine's errors come back as every other call's do.
func (s *Server) registerEnvoyRLS(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, envoyrls.New(termEngines{s}, envoyrls.Options{
		Authorize: func(ctx context.Context, pool string) error {
			return s.auth().CheckPool(s.auth().Identify(ctx), pool)
		},
		Status: func(pool string, err error) error {
			return refuse.ToStatus(s.log, "ShouldRateLimit", err, refuse.About{Pool: pool})
		},
		Count: func(ctx context.Context, n int) error {
			if !s.quotas.RateLimited() {
				return nil
			}
			if err := s.quotas.AllowRateN(s.auth().Identify(ctx).ClientKey(""), n); err != nil {
				return refuse.StatusOf(err, refuse.About{}).Err()
			}
			return nil
		},
	}))
}

// termEngines gives each call the engines of its terms: a server of a
// cluster has a new one for each term of each shard it leads. An Envoy
// call takes the term of every shard (the leader gate answers NOT_LEADER
// unless this server leads them all): the pools its descriptors match may
// be of any shard; on a server of a cluster, the terms of the shards it
// leads (fanEnvoy asks the others for the rest).
type termEngines struct{ s *Server }

func (e termEngines) Engine(ctx context.Context) envoyrls.Engine {
	ts, ok := ctx.Value(callTermsKey{}).(callTerms)
	if !ok { // a standalone server: its one shard
		ts = callTerms{{0, e.s.terms.Shard(0).Get()}}
	}
	if len(ts) == 1 {
		return termEngine{Engine: ts[0].t.Engine(), seq: ts[0].t.Seq()}
	}
	return shardEngines{terms: e.s.terms, ts: ts}
}

// termEngine is the engine of the term seq.
type termEngine struct {
	*limiter.Engine
	seq uint64
}

// PoolsGeneration tells the rules of one term's engine from another's.
func (e termEngine) PoolsGeneration() uint64 { return e.seq<<40 + e.Engine.PoolsGeneration() }

// shardEngines are the engines of the terms of several shards (every
// shard, or those a server of a cluster leads), as one: a pool's calls go
// to its shard's.
type shardEngines struct {
	terms *term.Table
	ts    callTerms // in shard order
}

// PoolsGeneration changes whenever any shard's term or pools do.
func (e shardEngines) PoolsGeneration() uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, st := range e.ts {
		binary.LittleEndian.PutUint64(b[:], st.t.Seq())
		_, _ = h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], st.t.Engine().PoolsGeneration())
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

func (e shardEngines) EnvoyRules() map[string]limiter.EnvoyRule {
	out := make(map[string]limiter.EnvoyRule)
	for _, st := range e.ts {
		for name, r := range st.t.Engine().EnvoyRules() {
			out[name] = r
		}
	}
	return out
}

// engineOf is the engine of pool's shard's term: one of ts, whose rules
// are the only ones matched (of a server of a cluster, the shards it
// leads).
func (e shardEngines) engineOf(pool string) *limiter.Engine {
	i := e.terms.ShardOf(pool)
	for _, st := range e.ts {
		if st.shard == i {
			return st.t.Engine()
		}
	}
	return e.ts[0].t.Engine() // unreachable: a matched pool is of one of ts
}

func (e shardEngines) Bucket(pool string) (limiter.BucketState, error) {
	return e.engineOf(pool).Bucket(pool)
}

func (e shardEngines) Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (limiter.TakeResult, error) {
	return e.engineOf(pool).Take(ctx, pool, tokens, maxWait)
}
