package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// adaptiveFlags are the adaptive-limit settings of pool create and pool
// update (the Pool.adaptive message).
type adaptiveFlags struct {
	enabled          bool
	target           string
	window           time.Duration
	errorThreshold   float64
	minSamples       int64
	backoff          float64
	increase         float64
	interval         time.Duration
	cooldown         time.Duration
	probeInterval    time.Duration
	minConcurrency   int64
	minRate          float64
	latencyTolerance float64
}

// adaptiveFlagFields maps each adaptive flag to its update_mask path.
var adaptiveFlagFields = []struct{ flag, field string }{
	{"adaptive", "adaptive.enabled"},
	{"adaptive-target", "adaptive.target"},
	{"adaptive-window", "adaptive.window"},
	{"adaptive-error-threshold", "adaptive.error_threshold"},
	{"adaptive-min-samples", "adaptive.min_samples"},
	{"adaptive-backoff", "adaptive.backoff"},
	{"adaptive-increase", "adaptive.increase"},
	{"adaptive-interval", "adaptive.interval"},
	{"adaptive-cooldown", "adaptive.cooldown"},
	{"adaptive-probe-interval", "adaptive.probe_interval"},
	{"adaptive-min-concurrency", "adaptive.min_concurrency"},
	{"adaptive-min-rate", "adaptive.min_rate"},
	{"adaptive-latency-tolerance", "adaptive.latency_tolerance"},
}

func (a *adaptiveFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&a.enabled, "adaptive", false, "adaptive limits: lower the effective limits when clients report errors, raise them back while healthy (the --adaptive-* flags turn them on unless --adaptive=false)")
	f.StringVar(&a.target, "adaptive-target", "", "limits adaptive control moves: all, concurrency or rate (default all)")
	f.DurationVar(&a.window, "adaptive-window", 0, "sliding window of outcomes (0: 10s)")
	f.Float64Var(&a.errorThreshold, "adaptive-error-threshold", 0, "fraction of errors and timeouts that cuts the limits (0: 0.1)")
	f.Int64Var(&a.minSamples, "adaptive-min-samples", 0, "outcomes the window needs before it can cut (0: 20)")
	f.Float64Var(&a.backoff, "adaptive-backoff", 0, "factor a cut multiplies the effective limits by (0: 0.8)")
	f.Float64Var(&a.increase, "adaptive-increase", 0, "step of a raise, as a fraction of the configured limit (0: 0.05)")
	f.DurationVar(&a.interval, "adaptive-interval", 0, "least time between a change and the next raise (0: 2s)")
	f.DurationVar(&a.cooldown, "adaptive-cooldown", 0, "least time between two cuts (0: 2s)")
	f.DurationVar(&a.probeInterval, "adaptive-probe-interval", 0, "least time between a change and a raise to the level where one last failed (0: 5 × the interval)")
	f.Int64Var(&a.minConcurrency, "adaptive-min-concurrency", 0, "floor of the effective concurrency limit (0: 1)")
	f.Float64Var(&a.minRate, "adaptive-min-rate", 0, "floor of the effective rate (0: 1% of the rate)")
	f.Float64Var(&a.latencyTolerance, "adaptive-latency-tolerance", 0, "also cut when latency exceeds this factor times its baseline, such as 2 (0: off)")
}

// set copies the value of the adaptive flag named flag into pool.
func (a *adaptiveFlags) set(pool *tollgatev1.Pool, flag string) error {
	if pool.Adaptive == nil {
		pool.Adaptive = &tollgatev1.Adaptive{}
	}
	ad := pool.Adaptive
	switch flag {
	case "adaptive":
		ad.Enabled = a.enabled
	case "adaptive-target":
		t, ok := map[string]tollgatev1.AdaptiveTarget{"all": tollgatev1.AdaptiveTarget_ADAPTIVE_TARGET_ALL,
			"concurrency": tollgatev1.AdaptiveTarget_ADAPTIVE_TARGET_CONCURRENCY, "rate": tollgatev1.AdaptiveTarget_ADAPTIVE_TARGET_RATE}[a.target]
		if !ok {
			return usageErrorf("--adaptive-target %q is not a target; use all, concurrency or rate", a.target)
		}
		ad.Target = t
	case "adaptive-window":
		ad.Window = durationpb.New(a.window)
	case "adaptive-error-threshold":
		ad.ErrorThreshold = a.errorThreshold
	case "adaptive-min-samples":
		ad.MinSamples = a.minSamples
	case "adaptive-backoff":
		ad.Backoff = a.backoff
	case "adaptive-increase":
		ad.Increase = a.increase
	case "adaptive-interval":
		ad.Interval = durationpb.New(a.interval)
	case "adaptive-cooldown":
		ad.Cooldown = durationpb.New(a.cooldown)
	case "adaptive-probe-interval":
		ad.ProbeInterval = durationpb.New(a.probeInterval)
	case "adaptive-min-concurrency":
		ad.MinConcurrency = a.minConcurrency
	case "adaptive-min-rate":
		ad.MinRate = a.minRate
	case "adaptive-latency-tolerance":
		ad.LatencyTolerance = a.latencyTolerance
	default:
		return fmt.Errorf("internal error: unknown pool flag --%s", flag)
	}
	return nil
}

// implicitEnable turns adaptive limits on when an --adaptive-* setting is
// given without --adaptive (settings of a disabled configuration would be
// cleared), adding the path to paths.
func (a *adaptiveFlags) implicitEnable(f *pflag.FlagSet, pool *tollgatev1.Pool, paths []string) []string {
	if pool.GetAdaptive() == nil || f.Changed("adaptive") {
		return paths
	}
	pool.Adaptive.Enabled = true
	return append(paths, "adaptive.enabled")
}

// adaptiveFlagNames lists the adaptive flags for messages.
func adaptiveFlagNames() string {
	var names []string
	for _, ff := range adaptiveFlagFields {
		names = append(names, "--"+ff.flag)
	}
	return strings.Join(names, ", ")
}
