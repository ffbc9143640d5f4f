package server

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/limiter"
)

// adaptiveFileFields are the keys of a pool's adaptive mapping in a pools
// file, named as in the API's Adaptive message.
var adaptiveFileFields = []string{"enabled", "target", "window", "error_threshold", "min_samples", "backoff", "increase",
	"interval", "cooldown", "probe_interval", "min_concurrency", "min_rate", "latency_tolerance"}

// adaptive parses a pool's adaptive settings: a mapping of
// adaptiveFileFields, such as
//
//	adaptive:
//	  enabled: true
//	  target: concurrency   # all (default), concurrency or rate
//	  window: 10s
//	  error_threshold: 0.1
//	  backoff: 0.9
//
// or just "adaptive: true" for the defaults. Absent keys mean the
// defaults; "enabled" defaults to true when the mapping is given.
func (p poolsParser) adaptive(v *yaml.Node) (limiter.AdaptiveConfig, error) {
	var a limiter.AdaptiveConfig
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool" {
		err := v.Decode(&a.Enabled)
		return a, err
	}
	if v.Kind != yaml.MappingNode {
		return a, p.errorf(v, "adaptive must be true, false, or a mapping with keys %s", strings.Join(adaptiveFileFields, ", "))
	}
	a.Enabled = true
	seen := make(map[string]bool, len(v.Content)/2)
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, n := v.Content[i], v.Content[i+1]
		if seen[k.Value] {
			return a, p.errorf(k, "key %q is given twice in adaptive", k.Value)
		}
		seen[k.Value] = true
		key := "adaptive." + k.Value
		var err error
		switch k.Value {
		case "enabled":
			if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
				return a, p.errorf(n, "%s must be true or false", key)
			}
			err = n.Decode(&a.Enabled)
		case "target":
			var s string
			if s, err = p.str(key, n); err == nil {
				switch s {
				case "all":
					a.Target = limiter.AdaptAll
				case "concurrency":
					a.Target = limiter.AdaptConcurrency
				case "rate":
					a.Target = limiter.AdaptRate
				default:
					err = p.errorf(n, "%s must be all, concurrency or rate, not %q", key, truncate(s, 64))
				}
			}
		case "window":
			a.Window, err = p.duration(key, n)
		case "interval":
			a.Interval, err = p.duration(key, n)
		case "cooldown":
			a.Cooldown, err = p.duration(key, n)
		case "probe_interval":
			a.ProbeInterval, err = p.duration(key, n)
		case "error_threshold":
			a.ErrorThreshold, err = p.float(key, n)
		case "backoff":
			a.Backoff, err = p.float(key, n)
		case "increase":
			a.Increase, err = p.float(key, n)
		case "min_rate":
			a.MinRate, err = p.float(key, n)
		case "latency_tolerance":
			a.LatencyTolerance, err = p.float(key, n)
		case "min_samples":
			a.MinSamples, err = p.int(key, n)
		case "min_concurrency":
			a.MinConcurrency, err = p.int(key, n)
		default:
			err = p.errorf(k, "unknown field %q in adaptive; it has %s", truncate(k.Value, 64), strings.Join(adaptiveFileFields, ", "))
		}
		if err != nil {
			return a, err
		}
	}
	return a, nil
}
