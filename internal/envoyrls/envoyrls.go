// Package envoyrls serves Envoy's global rate-limit API
// (envoy.service.ratelimit.v3.RateLimitService) from Tollgate's pools: a
// pool's EnvoyRule says which domain and descriptors it limits. See
// docs/envoy.md.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tollgate/tollgate/limiter"
)

// Engine is what the service needs of the engine.
type Engine interface {
	PoolsGeneration() uint64
	EnvoyRules() map[string]limiter.EnvoyRule
	Bucket(pool string) (limiter.BucketState, error)
	Take(ctx context.Context, pool string, tokens int64, maxWait time.Duration) (limiter.TakeResult, error)
}

// Options adapt the service to the server that serves it.
type Options struct {
	// Authorize refuses a caller that may not use pool, with the error
	// the caller gets; nil allows every caller.
	Authorize func(ctx context.Context, pool string) error
	// Status converts an engine error about pool to the error the caller
	// gets; nil returns it as it is.
	Status func(pool string, err error) error
}

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 64

// Service implements RateLimitService.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	eng  Engine
	opts Options

	mu      sync.Mutex
	gen     uint64
	built   bool
	byDom   map[string][]rule                           // rules by domain, in pool name order
	buckets map[string]*lru.Cache[string, *valueBucket] // per-value buckets by pool
}

type rule struct {
	pool string
	limiter.EnvoyRule
}

// New returns the service over eng.
func New(eng Engine, opts Options) *Service {
	return &Service{eng: eng, opts: opts, buckets: make(map[string]*lru.Cache[string, *valueBucket])}
}

// ShouldRateLimit answers each descriptor of req OK or OVER_LIMIT; the
// overall code is OVER_LIMIT if any descriptor is.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := check(req); err != nil {
		return nil, s.status("", err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, d := range req.GetDescriptors() {
		st, err := s.decide(ctx, req, d)
		if err != nil {
			return nil, err
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
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

// decide answers one descriptor.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, d *commonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	r, buckets, ok := s.match(req.GetDomain(), d.GetEntries())
	if !ok || d.GetIsNegativeHits() {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(ctx, r.pool); err != nil {
			return nil, err
		}
	}
	hits := hitsOf(req, d)
	var (
		res result
		err error
	)
	if buckets == nil {
		res, err = s.takeFromPool(ctx, r.pool, hits)
	} else {
		res, err = s.takeFromValue(r.pool, buckets, valueKey(d.GetEntries()), hits)
	}
	switch {
	case errors.Is(err, limiter.ErrPoolNotFound), errors.Is(err, limiter.ErrNoRateLimit):
		// Deleted, or its rate removed, since the rules were read.
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	case err != nil:
		return nil, s.status(r.pool, err)
	}
	return res.status(r.pool), nil
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
func (s *Service) match(domain string, entries []*commonv3.RateLimitDescriptor_Entry) (rule, *lru.Cache[string, *valueBucket], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	for _, r := range s.byDom[domain] {
		if matches(r.EnvoyRule, entries) {
			return r, s.buckets[r.pool], true
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

// refreshLocked rereads the rules when a pool changed. The per-value
// buckets of a pool whose rule is unchanged are kept; the others go.
func (s *Service) refreshLocked() {
	gen := s.eng.PoolsGeneration()
	if s.built && gen == s.gen {
		return
	}
	rules := s.eng.EnvoyRules()
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	old := s.byDom
	s.byDom = make(map[string][]rule)
	buckets := make(map[string]*lru.Cache[string, *valueBucket])
	for _, name := range names {
		r := rule{pool: name, EnvoyRule: rules[name]}
		s.byDom[r.Domain] = append(s.byDom[r.Domain], r)
		if !r.PerValue() {
			continue
		}
		if c, ok := s.buckets[name]; ok && sameRule(old, r) {
			buckets[name] = c
			continue
		}
		c, err := lru.New[string, *valueBucket](int(r.MaxBuckets))
		if err != nil { // MaxBuckets < 1: Validate refuses it
			continue
		}
		buckets[name] = c
	}
	s.buckets, s.gen, s.built = buckets, gen, true
}

// sameRule reports whether byDom held r's pool with the same rule.
func sameRule(byDom map[string][]rule, r rule) bool {
	for _, o := range byDom[r.Domain] {
		if o.pool == r.pool {
			return o.MaxBuckets == r.MaxBuckets && slices.Equal(o.Descriptors, r.Descriptors)
		}
	}
	return false
}

// maxKeyLen bounds the per-value buckets' keys: longer keys are hashed.
const maxKeyLen = 256

// valueKey names the per-value bucket of a descriptor's values.
func valueKey(entries []*commonv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(e.GetValue())
	}
	if b.Len() <= maxKeyLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return string(sum[:])
}

// invalid is an INVALID_ARGUMENT engine error; Options.Status makes it
// the caller's status.
func invalid(format string, args ...any) error {
	return &limiter.Error{Code: limiter.CodeInvalidArgument, Reason: limiter.ReasonInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
