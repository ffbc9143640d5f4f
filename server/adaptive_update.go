package server

import (
	"strings"

	"github.com/tollgate/tollgate/limiter"
)

// adaptivePaths are the update_mask paths of Pool.adaptive's fields:
// "adaptive" replaces the whole message, "adaptive.<field>" one field.
var adaptivePaths = []string{"adaptive.enabled", "adaptive.target", "adaptive.window", "adaptive.error_threshold",
	"adaptive.min_samples", "adaptive.backoff", "adaptive.increase", "adaptive.interval", "adaptive.cooldown",
	"adaptive.probe_interval", "adaptive.min_concurrency", "adaptive.min_rate", "adaptive.latency_tolerance"}

// isAdaptivePath reports whether path names a field of Pool.adaptive.
func isAdaptivePath(path string) bool {
	for _, p := range adaptivePaths {
		if p == path {
			return true
		}
	}
	return false
}

// applyAdaptivePath copies the field of src that path ("adaptive.<field>")
// names into dst. A field set to its zero value is reset to its default.
func applyAdaptivePath(dst *limiter.AdaptiveConfig, src limiter.AdaptiveConfig, path string) {
	switch strings.TrimPrefix(path, "adaptive.") {
	case "enabled":
		dst.Enabled = src.Enabled
	case "target":
		dst.Target = src.Target
	case "window":
		dst.Window = src.Window
	case "error_threshold":
		dst.ErrorThreshold = src.ErrorThreshold
	case "min_samples":
		dst.MinSamples = src.MinSamples
	case "backoff":
		dst.Backoff = src.Backoff
	case "increase":
		dst.Increase = src.Increase
	case "interval":
		dst.Interval = src.Interval
	case "cooldown":
		dst.Cooldown = src.Cooldown
	case "probe_interval":
		dst.ProbeInterval = src.ProbeInterval
	case "min_concurrency":
		dst.MinConcurrency = src.MinConcurrency
	case "min_rate":
		dst.MinRate = src.MinRate
	case "latency_tolerance":
		dst.LatencyTolerance = src.LatencyTolerance
	}
}
