package store

import (
	"encoding/json"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// jsonRecord is the first on-disk form of a limiter.SavedPool (version 1):
// JSON with explicit field names and durations in nanoseconds. Records are
// no longer written in it (see Record), but a data directory written by
// an older server still holds them, and they are read until the engine
// rewrites them.
type jsonRecord struct {
	Name             string    `json:"name"`
	Description      string    `json:"description,omitempty"`
	ConcurrencyLimit int64     `json:"concurrency_limit,omitempty"`
	Rate             float64   `json:"rate,omitempty"`
	Burst            int64     `json:"burst,omitempty"`
	DefaultLeaseTTL  int64     `json:"default_lease_ttl_ns"`
	MaxLeaseTTL      int64     `json:"max_lease_ttl_ns"`
	MaxWaiters       int64     `json:"max_waiters"`
	CreateTime       time.Time `json:"create_time"`
	UpdateTime       time.Time `json:"update_time"`
	TokenCeiling     uint64    `json:"token_ceiling"`
	LeaseHorizon     time.Time `json:"lease_horizon"`
	TTLBound         int64     `json:"ttl_bound_ns"`
	// Added with the recovery of rate shares: the share horizon.
	ShareHorizon  time.Time `json:"share_horizon,omitzero"`
	ShareTTLBound int64     `json:"share_ttl_bound_ns,omitempty"`
	// Added with persisted adaptive limits: the lowered effective values.
	EffectiveConcurrency int64   `json:"effective_concurrency,omitempty"`
	EffectiveRate        float64 `json:"effective_rate,omitempty"`
	// Added with adaptive limits and rate shares.
	SafeRate float64         `json:"safe_rate,omitempty"`
	Adaptive *adaptiveRecord `json:"adaptive,omitempty"`
	// Added with revocation: "revoke", or absent for wait.
	RevocationPolicy string `json:"revocation_policy,omitempty"`
	// Added with suspend/resume: the pool is suspended.
	Suspended bool `json:"suspended,omitempty"`
	// Added with event marks: as configured (0 or absent: the default;
	// -1: off).
	OverloadMark         int64   `json:"overload_mark,omitempty"`
	NearFullMark         float64 `json:"near_full_mark,omitempty"`
	LowUtilisationMark   float64 `json:"low_utilisation_mark,omitempty"`
	LowUtilisationPeriod int64   `json:"low_utilisation_period_ns,omitempty"`
	// Added with active and passive pools: "active" or "passive" (absent:
	// free), "spread" (absent: reuse). An active pool's instances are kept
	// apart, in the resources bucket; Resources is only
	// read, for records written before that.
	ResourceKind string           `json:"resource_kind,omitempty"`
	Selection    string           `json:"selection_policy,omitempty"`
	Resources    []resourceRecord `json:"resources,omitempty"`
}

// resourceRecord is an active pool's instance on disk.
type resourceRecord struct {
	ID         string            `json:"id"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// decodeJSON reads a version 1 record stored under key. The times come
// back in UTC without a monotonic reading, as written.
func decodeJSON(key, v []byte) (limiter.SavedPool, error) {
	var r jsonRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	policy, err := limiter.ParseRevocationPolicy(r.RevocationPolicy)
	if err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	kind, err := limiter.ParseResourceKind(r.ResourceKind)
	if err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	selection, err := limiter.ParseSelectionPolicy(r.Selection)
	if err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	var resources []limiter.Resource
	for _, res := range r.Resources {
		resources = append(resources, limiter.Resource{ID: res.ID, Attributes: res.Attributes})
	}
	return limiter.SavedPool{
		Config: limiter.PoolConfig{
			Name:             r.Name,
			Description:      r.Description,
			ConcurrencyLimit: r.ConcurrencyLimit,
			Rate:             r.Rate,
			Burst:            r.Burst,
			DefaultLeaseTTL:  time.Duration(r.DefaultLeaseTTL),
			MaxLeaseTTL:      time.Duration(r.MaxLeaseTTL),
			MaxWaiters:       r.MaxWaiters,
			SafeRate:         r.SafeRate,
			Adaptive:         r.Adaptive.config(),
			RevocationPolicy: policy,
			ResourceKind:     kind,
			Selection:        selection,

			OverloadMark:         r.OverloadMark,
			NearFullMark:         r.NearFullMark,
			LowUtilisationMark:   r.LowUtilisationMark,
			LowUtilisationPeriod: time.Duration(r.LowUtilisationPeriod),
		},
		Resources:  resources,
		CreateTime: r.CreateTime,
		UpdateTime: r.UpdateTime,
		Suspended:  r.Suspended,
		State: limiter.DurableState{
			TokenCeiling:         r.TokenCeiling,
			LeaseHorizon:         r.LeaseHorizon,
			TTLBound:             time.Duration(r.TTLBound),
			ShareHorizon:         r.ShareHorizon,
			ShareTTLBound:        time.Duration(r.ShareTTLBound),
			EffectiveConcurrency: r.EffectiveConcurrency,
			EffectiveRate:        r.EffectiveRate,
			HeldBound:            -1, // not kept then
		},
	}, nil
}

// adaptiveRecord is the version 1 form of a pool's limiter.AdaptiveConfig,
// with durations in nanoseconds; absent when adaptive control is off.
type adaptiveRecord struct {
	Target           uint8   `json:"target,omitempty"` // limiter.AdaptiveTarget: 0 all, 1 concurrency, 2 rate
	Window           int64   `json:"window_ns"`
	ErrorThreshold   float64 `json:"error_threshold"`
	MinSamples       int64   `json:"min_samples"`
	Backoff          float64 `json:"backoff"`
	Increase         float64 `json:"increase"`
	Interval         int64   `json:"interval_ns"`
	Cooldown         int64   `json:"cooldown_ns"`
	MinConcurrency   int64   `json:"min_concurrency,omitempty"`
	MinRate          float64 `json:"min_rate,omitempty"`
	LatencyTolerance float64 `json:"latency_tolerance,omitempty"`
}

// config returns the configuration r records; off for nil.
func (r *adaptiveRecord) config() limiter.AdaptiveConfig {
	if r == nil {
		return limiter.AdaptiveConfig{}
	}
	return limiter.AdaptiveConfig{
		Enabled: true, Target: limiter.AdaptiveTarget(r.Target), Window: time.Duration(r.Window), ErrorThreshold: r.ErrorThreshold,
		MinSamples: r.MinSamples, Backoff: r.Backoff, Increase: r.Increase, Interval: time.Duration(r.Interval),
		Cooldown: time.Duration(r.Cooldown), MinConcurrency: r.MinConcurrency, MinRate: r.MinRate, LatencyTolerance: r.LatencyTolerance,
	}
}
