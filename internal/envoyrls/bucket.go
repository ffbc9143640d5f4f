package envoyrls

import (
	"context"
	"errors"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	rlsv3 "github.com/tollgate/tollgate/proto/envoy/service/ratelimit/v3"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"

	"github.com/tollgate/tollgate/limiter"
)

// result is one descriptor's decision and the bucket it was made on.
type result struct {
	ok     bool
	hits   int64
	bucket limiter.BucketState // after the decision
}

// takeFromPool takes hits tokens from the pool's own bucket, through the
// engine's Take without waiting, so that adaptive cuts, rate shares and
// live changes apply as to any take.
func (s *Service) takeFromPool(ctx context.Context, eng Engine, pool string, hits int64) (result, error) {
	_, err := eng.Take(ctx, pool, hits, 0)
	var le *apierr.Error
	switch {
	case err == nil:
	case errors.As(err, &le) && (le.Code == apierr.CodeResourceExhausted || errors.Is(err, apierr.ErrInvalidArgument)):
		// Not there now, or more than the burst: over the limit.
	default:
		return result{}, err
	}
	b, berr := eng.Bucket(pool)
	if berr != nil {
		return result{}, berr
	}
	return result{ok: err == nil, hits: hits, bucket: b}, nil
}

// takeFromValue takes hits tokens for the values of one descriptor, from
// their bucket in the pool's table.
func (s *Service) takeFromValue(eng Engine, pool string, t *table, key string, hits int64) (result, error) {
	d, err := t.take(eng, pool, key, hits)
	if err != nil {
		return result{}, err
	}
	if s.opts.Decided != nil {
		s.opts.Decided(Decision{Pool: pool, Key: key, At: d.at, Hits: hits, OK: d.ok, Overflow: d.overflow})
	}
	return result{ok: d.ok, hits: hits, bucket: d.bucket}, nil
}

// never reports whether the hits asked for exceed the bucket's burst: no
// retry of the descriptor can pass.
func (r result) never() bool { return !r.ok && r.hits > r.bucket.Burst }

// status is the descriptor's answer. duration_until_reset is when the
// bucket is full again (OK), or when it holds the hits asked for, the
// earliest a retry can pass (OVER_LIMIT); unset when it never refills or
// no retry can pass (never).
func (r result) status(pool string) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:           rlsv3.RateLimitResponse_OK,
		CurrentLimit:   currentLimit(pool, r.bucket.Rate),
		LimitRemaining: uint32(min(max(math.Floor(r.bucket.Tokens), 0), math.MaxUint32)),
	}
	want := float64(r.bucket.Burst)
	if !r.ok {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		want = float64(r.hits)
	}
	if r.bucket.Rate > 0 && !r.never() {
		secs := max(want-r.bucket.Tokens, 0) / r.bucket.Rate
		st.DurationUntilReset = durationpb.New(time.Duration(min(secs, float64(math.MaxInt64/2)/float64(time.Second)) * float64(time.Second)))
	}
	return st
}

// units are the units current_limit may be given in, shortest first.
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	secs float64
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 86400},
}

// currentLimit gives a rate in tokens per second as requests per unit: per
// second, or the shortest longer unit in which it is at least 1.
func currentLimit(pool string, perSec float64) *rlsv3.RateLimitResponse_RateLimit {
	u := units[0]
	for _, u = range units {
		if perSec*u.secs >= 1 {
			break
		}
	}
	return &rlsv3.RateLimitResponse_RateLimit{Name: pool, Unit: u.unit,
		RequestsPerUnit: uint32(min(math.Round(perSec*u.secs), math.MaxUint32))}
}
