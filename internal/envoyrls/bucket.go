package envoyrls

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/durationpb"

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
func (s *Service) takeFromPool(ctx context.Context, pool string, hits int64) (result, error) {
	_, err := s.eng.Take(ctx, pool, hits, 0)
	var le *limiter.Error
	switch {
	case err == nil:
	case errors.As(err, &le) && (le.Code == limiter.CodeResourceExhausted || errors.Is(err, limiter.ErrInvalidArgument)):
		// Not there now, or more than the burst: over the limit.
	default:
		return result{}, err
	}
	b, berr := s.eng.Bucket(pool)
	if berr != nil {
		return result{}, berr
	}
	return result{ok: err == nil, hits: hits, bucket: b}, nil
}

// valueBucket is the token bucket of one descriptor value.
type valueBucket struct {
	mu   sync.Mutex
	lim  *rate.Limiter
	last time.Time // of the last decision on lim
}

// takeFromValue takes hits tokens from the bucket of one descriptor value,
// made on demand with the pool's effective rate and burst. When those
// changed since the bucket's last decision, the bucket refills at the old
// rate until the change and at the new one after it.
func (s *Service) takeFromValue(pool string, buckets *lru.Cache[string, *valueBucket], key string, hits int64) (result, error) {
	b, err := s.eng.Bucket(pool)
	if err != nil {
		return result{}, err
	}
	r, now := rate.Limit(b.Rate), b.At
	vb, found := buckets.Get(key)
	if !found {
		fresh := &valueBucket{lim: rate.NewLimiter(r, int(b.Burst)), last: now} // full
		if prev, ok, _ := buckets.PeekOrAdd(key, fresh); ok {
			vb = prev
		} else {
			vb = fresh
		}
	}
	vb.mu.Lock()
	defer vb.mu.Unlock()
	if vb.lim.Limit() != r || vb.lim.Burst() != int(b.Burst) {
		at := vb.last // the change's time, within [last decision, now]
		if b.Since.After(at) {
			at = b.Since
		}
		if at.After(now) {
			at = now
		}
		vb.lim.SetLimitAt(at, r)
		vb.lim.SetBurstAt(at, int(b.Burst))
	}
	if now.After(vb.last) {
		vb.last = now
	}
	res := vb.lim.ReserveN(now, int(min(hits, math.MaxInt32)))
	ok := res.OK() && res.DelayFrom(now) == 0
	if !ok {
		res.CancelAt(now)
	}
	b.Tokens = vb.lim.TokensAt(now)
	return result{ok: ok, hits: hits, bucket: b}, nil
}

// status is the descriptor's answer. duration_until_reset is when the
// bucket is full again (OK), or when it holds the hits asked for, the
// earliest a retry can pass (OVER_LIMIT); unset when it never refills.
func (r result) status(pool string) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:           rlsv3.RateLimitResponse_OK,
		CurrentLimit:   currentLimit(pool, r.bucket.Rate),
		LimitRemaining: uint32(min(max(math.Floor(r.bucket.Tokens), 0), math.MaxUint32)),
	}
	want := float64(r.bucket.Burst)
	if !r.ok {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		want = float64(min(r.hits, r.bucket.Burst))
	}
	if r.bucket.Rate > 0 {
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
