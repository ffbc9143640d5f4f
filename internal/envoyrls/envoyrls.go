// Package envoyrls serves Envoy's global rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService) from Tollgate's pools: a
// pool's EnvoyRule says which domain and descriptors it limits. See
// docs/envoy.md.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/tollgate/tollgate/proto/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"

	"github.com/tollgate/tollgate/limiter"
)

// Engine is what the service needs of the engine.
type Engine interface {
	PoolsGeneration() uint64
	EnvoyRules() map[string]limiter.EnvoyRule
	Bucket(pool string) (limiter.BucketState, error)
	Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (limiter.TakeResult, error)
}

// Engines gives each call the engine it uses throughout: the one served
// when the call started (a server of a cluster serves a new one for each
// term it leads, whose PoolsGeneration differs from every earlier one's).
type Engines interface {
	Engine(ctx context.Context) Engine
}

// One is the Engines of a service that has one engine for good.
func One(eng Engine) Engines { return one{eng} }

type one struct{ eng Engine }

func (o one) Engine(context.Context) Engine { return o.eng }

// Options adapt the service to the server that serves it.
type Options struct {
	// Authorize refuses a caller that may not use pool, with the error
	// the caller gets; nil allows every caller.
	Authorize func(ctx context.Context, pool string) error
	// Status converts an engine error about pool to the error the caller
	// gets; nil returns it as it is.
	Status func(pool string, err error) error
	// Count takes n requests from the caller's request rate, or returns
	// the error the caller gets; a call counts one request for each of its
	// descriptors past the first (the call itself). Nil counts nothing.
	Count func(ctx context.Context, n int) error
	// Decided, when set, is told of each decision on a per-value bucket.
	Decided func(Decision)
}

// Decision is one descriptor's decision on a per-value bucket.
type Decision struct {
	Pool string
	// Key names the descriptor's values (its bucket), opaquely.
	Key string
	// At is the decision's time by the engine's clock: the decisions of
	// one pool are made in the order of their times.
	At   time.Time
	Hits int64
	OK   bool
	// Overflow is set when the value had no bucket and the pool's table
	// was full: the overflow bucket answered.
	Overflow bool
}

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 64

// Service implements RateLimitService.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engines Engines
	opts    Options

	mu     sync.Mutex
	gen    uint64
	built  bool
	rules  map[string]limiter.EnvoyRule // by pool
	byDom  map[string][]rule            // rules by domain, in pool name order
	tables map[string]*table            // per-value buckets by pool
}

type rule struct {
	pool string
	limiter.EnvoyRule
}

// New returns the service over the engines of engines.
func New(engines Engines, opts Options) *Service {
	return &Service{engines: engines, opts: opts, tables: make(map[string]*table)}
}

// ShouldRateLimit answers each descriptor of req OK or OVER_LIMIT; the
// overall code is OVER_LIMIT if any descriptor is.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := check(req); err != nil {
		return nil, s.status("", err)
	}
	if n := len(req.GetDescriptors()); n > 1 && s.opts.Count != nil {
		if err := s.opts.Count(ctx, n-1); err != nil {
			return nil, err
		}
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	var never []string
	eng := s.engines.Engine(ctx)
	for _, d := range req.GetDescriptors() {
		st, res, err := s.decide(ctx, eng, req, d)
		if err != nil {
			return nil, err
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if res.never() {
			never = append(never, fmt.Sprintf("%d hits exceed the burst %d of pool %q", res.hits, res.bucket.Burst, st.GetCurrentLimit().GetName()))
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if len(never) > 0 {
		resp.RawBody = []byte(strings.Join(never, "; ") + ": no retry of this request can pass\n")
	}
	return resp, nil
}

func check(req *rlsv3.RateLimitRequest) error {
	switch n := len(req.GetDescriptors()); {
	case req.GetDomain() == "":
		return invalid("domain is empty; Envoy's rate_limits name one (the domain of the ratelimit filter)")
	case n == 0:
		return invalid("descriptors is empty; send at least one descriptor")
	case n > MaxDescriptors:
		return invalid("%d descriptors; the most is %d", n, MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) == 0 {
			return invalid("descriptors[%d] has no entries; a descriptor has at least one key and value", i)
		}
	}
	return nil
}

// decide answers one descriptor, with the decision it made, if any.
func (s *Service) decide(ctx context.Context, eng Engine, req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, result, error) {
	r, t, ok := s.match(eng, req.GetDomain(), d.GetEntries())
	if !ok || d.GetIsNegativeHits() {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, result{ok: true}, nil
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(ctx, r.pool); err != nil {
			return nil, result{}, err
		}
	}
	hits := hitsOf(req, d)
	var (
		res result
		err error
	)
	if t == nil {
		res, err = s.takeFromPool(ctx, eng, r.pool, hits)
	} else {
		res, err = s.takeFromValue(eng, r.pool, t, valueKey(r.EnvoyRule, d.GetEntries()), hits)
	}
	switch {
	case errors.Is(err, apierr.ErrPoolNotFound), errors.Is(err, apierr.ErrNoRateLimit):
		// Deleted, or its rate removed, since the rules were read.
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, result{ok: true}, nil
	case err != nil:
		return nil, result{}, s.status(r.pool, err)
	}
	return res.status(r.pool), res, nil
}

// status converts an engine error with Options.Status.
func (s *Service) status(pool string, err error) error {
	if s.opts.Status == nil {
		return err
	}
	return s.opts.Status(pool, err)
}

// hitsOf is the hits the descriptor adds: its own hits_addend, else the
// request's, where 0 means 1.
func hitsOf(req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil && h.GetValue() > 0 {
		return int64(min(h.GetValue(), math.MaxInt32))
	}
	return max(int64(req.GetHitsAddend()), 1)
}

// match finds the rule of the first pool, by name, that the descriptor
// matches, and that pool's per-value buckets (nil for a rule whose keys
// all fix a value).
func (s *Service) match(eng Engine, domain string, entries []*commonv3.RateLimitDescriptor_Entry) (rule, *table, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked(eng)
	for _, r := range s.byDom[domain] {
		if matches(r.EnvoyRule, entries) {
			return r, s.tables[r.pool], true
		}
	}
	return rule{}, nil, false
}

func matches(r limiter.EnvoyRule, entries []*commonv3.RateLimitDescriptor_Entry) bool {
	if len(entries) != len(r.Descriptors) {
		return false
	}
	for i, k := range r.Descriptors {
		e := entries[i]
		if e.GetKey() != k.Key || (k.Value != "" && e.GetValue() != k.Value) {
			return false
		}
	}
	return true
}

// refreshLocked rereads the rules of eng when a pool changed. A pool keeps its
// per-value buckets while its rule names the same values: the same keys in
// the same order, the same of them of any value (its domain, fixed values
// and max_buckets may change).
func (s *Service) refreshLocked(eng Engine) {
	gen := eng.PoolsGeneration()
	if s.built && gen == s.gen {
		return
	}
	rules := eng.EnvoyRules()
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	s.byDom = make(map[string][]rule)
	tables := make(map[string]*table)
	for _, name := range names {
		r := rule{pool: name, EnvoyRule: rules[name]}
		s.byDom[r.Domain] = append(s.byDom[r.Domain], r)
		if !r.PerValue() {
			continue
		}
		if t, ok := s.tables[name]; ok && shape(s.rules[name]) == shape(r.EnvoyRule) {
			t.setMax(int(r.MaxBuckets))
			tables[name] = t
			continue
		}
		tables[name] = newTable(int(r.MaxBuckets))
	}
	s.rules, s.tables, s.gen, s.built = rules, tables, gen, true
}

// shape is a rule's keys, each marked with whether it takes any value.
func shape(r limiter.EnvoyRule) string {
	var b []byte
	for _, d := range r.Descriptors {
		b = binary.AppendUvarint(b, uint64(len(d.Key)))
		b = append(b, d.Key...)
		if d.Value == "" {
			b = append(b, '*')
		} else {
			b = append(b, '=')
		}
	}
	return string(b)
}

// maxKeyLen bounds the per-value buckets' keys: longer keys are hashed.
const maxKeyLen = 256

// Tags of the two kinds of bucket keys: the values themselves, or their
// hash.
const (
	keyValues byte = iota
	keyHash
)

// valueKey names the per-value bucket of a descriptor's values: the
// values of the rule's keys of any value, each with its length, so that
// no two lists of values share one.
func valueKey(r limiter.EnvoyRule, entries []*commonv3.RateLimitDescriptor_Entry) string {
	var buf [64]byte
	b := append(buf[:0], keyValues)
	for i, d := range r.Descriptors {
		if d.Value != "" {
			continue
		}
		v := entries[i].GetValue()
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	if len(b) <= maxKeyLen {
		return string(b)
	}
	sum := sha256.Sum256(b)
	return string(append([]byte{keyHash}, sum[:]...))
}

// invalid is an INVALID_ARGUMENT engine error; Options.Status makes it
// the caller's status.
func invalid(format string, args ...any) error {
	return &apierr.Error{Code: apierr.CodeInvalidArgument, Reason: apierr.ReasonInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
