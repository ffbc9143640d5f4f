package store

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// adaptiveRecord is the on-disk form of a pool's limiter.AdaptiveConfig,
// with explicit names and durations in nanoseconds; absent when adaptive
// control is off.
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
	ProbeInterval    int64   `json:"probe_interval_ns,omitempty"` // absent in records from before it: the default
}

// adaptiveToRecord returns the record of c, or nil when it is off.
func adaptiveToRecord(c limiter.AdaptiveConfig) *adaptiveRecord {
	if !c.Enabled {
		return nil
	}
	return &adaptiveRecord{
		Target: uint8(c.Target), Window: int64(c.Window), ErrorThreshold: c.ErrorThreshold, MinSamples: c.MinSamples,
		Backoff: c.Backoff, Increase: c.Increase, Interval: int64(c.Interval), Cooldown: int64(c.Cooldown),
		MinConcurrency: c.MinConcurrency, MinRate: c.MinRate, LatencyTolerance: c.LatencyTolerance, ProbeInterval: int64(c.ProbeInterval),
	}
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
		ProbeInterval: time.Duration(r.ProbeInterval),
	}
}
