package adaptivesim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// FastFailConfig describes a run against a backend that refuses at once
// (503) every request beyond its capacity in flight, and hangs (every
// request times out) in a phase of capacity 0. Clients are goroutines that
// loop: acquire a lease of the pool (waiting for one), send a request,
// release, and report their outcomes every ReportEvery as the Go client
// does. The trace's rates are concurrency: Configured and Effective are
// the pool's concurrency limits, Capacity the backend's, Admitted and
// Errors requests per second.
type FastFailConfig struct {
	// Pool must have a concurrency limit.
	Pool    limiter.PoolConfig
	Clients int
	// Phases of the backend; Phase.Capacity is the requests it serves at
	// once.
	Phases []Phase
	// Service is the mean time the backend takes for a request it serves
	// (exponential); Refuse the time of a refusal; Timeout that of a
	// request to a hung backend.
	Service, Refuse, Timeout  time.Duration
	Tick, ReportEvery, Sample time.Duration
	Seed                      uint64
}

// DefaultFastFail is the run of issue 15: a pool of concurrency 16 with
// adaptive limits (window 5s, threshold 0.1, 20 samples, backoff 0.8, +1
// every 2s), 24 clients, and a backend that serves 4 requests at once
// (20ms each on average) and refuses the rest at once, then serves only
// 2, hangs for 15s, and heals. A refusal takes its client 50ms (the round
// trip and its handling): with it, the controller of before gentler
// probing shows the 5% error floor seen in the field.
func DefaultFastFail() FastFailConfig {
	return FastFailConfig{
		Pool: limiter.PoolConfig{Name: "backend", ConcurrencyLimit: 16, MaxLeaseTTL: time.Hour, DefaultLeaseTTL: time.Hour,
			Adaptive: limiter.AdaptiveConfig{Enabled: true, Window: 5 * time.Second, ErrorThreshold: 0.1, MinSamples: 20,
				Backoff: 0.8, Increase: 1.0 / 16, Interval: 2 * time.Second}},
		Clients: 24,
		Phases: []Phase{
			{Until: 90 * time.Second, Capacity: 4, Name: "4 in flight"},
			{Until: 110 * time.Second, Capacity: 2, Name: "degraded: 2"},
			{Until: 125 * time.Second, Capacity: 0, Name: "hung"},
			{Until: 180 * time.Second, Capacity: 4, Name: "healed: 4"},
		},
		Service: 20 * time.Millisecond, Refuse: 50 * time.Millisecond, Timeout: time.Second,
		Tick: time.Millisecond, ReportEvery: time.Second, Sample: time.Second,
		Seed: 1,
	}
}

// ffClient is one client goroutine of RunFastFail.
type ffClient struct {
	lease   limiter.Lease
	busy    bool          // holds a lease, its request in flight
	until   time.Duration // when the request ends
	outcome limiter.Outcome
	lat     time.Duration
	served  bool // the backend counts it in flight
}

// RunFastFail simulates cfg and returns its trace.
func RunFastFail(cfg FastFailConfig) (Trace, error) {
	if cfg.Clients < 1 || cfg.Tick <= 0 || cfg.Sample < cfg.Tick || cfg.ReportEvery < cfg.Tick || len(cfg.Phases) == 0 || cfg.Pool.ConcurrencyLimit == 0 {
		return Trace{}, fmt.Errorf("adaptivesim: bad config %+v", cfg)
	}
	tr := Trace{}
	e, clk, err := tr.start(cfg.Pool)
	if err != nil {
		return Trace{}, err
	}
	defer e.Close()
	name := cfg.Pool.Name
	rng := newRand(cfg.Seed)
	ctx := context.Background()
	clients := make([]ffClient, cfg.Clients)
	pending := make([]limiter.OutcomeReport, cfg.Clients) // counted, not yet reported
	inFlight := 0                                         // requests the backend is serving
	end := cfg.Phases[len(cfg.Phases)-1].Until
	reportTicks := int(cfg.ReportEvery / cfg.Tick)
	sampleTicks := int(cfg.Sample / cfg.Tick)
	var acc Point
	for tick := 0; time.Duration(tick)*cfg.Tick < end; tick++ {
		now := time.Duration(tick) * cfg.Tick
		capacity := capacityAt(cfg.Phases, now)
		for i := range clients {
			c := &clients[i]
			if c.busy && c.until <= now { // the request ended: count it, release
				c.busy = false
				if c.served {
					inFlight--
				}
				count(&pending[i], &acc, c.outcome, c.lat)
				if _, err := e.Release(name, c.lease.FencingToken); err != nil {
					return Trace{}, err
				}
			}
			if c.busy {
				continue
			}
			l, err := e.Acquire(ctx, limiter.AcquireRequest{Pool: name, Weight: 1, NoWait: true})
			if err != nil {
				if !errors.Is(err, apierr.ErrNoCapacity) {
					return Trace{}, err
				}
				continue // waits: tries again next tick
			}
			c.lease, c.busy, c.served = l, true, false
			acc.Admitted++
			switch {
			case capacity == 0:
				c.outcome, c.lat = limiter.OutcomeTimeout, cfg.Timeout
			case float64(inFlight) >= capacity:
				c.outcome, c.lat = limiter.OutcomeError, cfg.Refuse
			default:
				inFlight++
				c.served = true
				c.outcome = limiter.OutcomeSuccess
				c.lat = max(cfg.Tick, time.Duration(rng.ExpFloat64()*float64(cfg.Service)))
			}
			c.until = now + c.lat
		}
		if err := report(e, name, pending, tick, reportTicks); err != nil {
			return Trace{}, err
		}
		clk.Advance(cfg.Tick)
		if (tick+1)%sampleTicks == 0 {
			info, err := e.GetPool(name)
			if err != nil {
				return Trace{}, err
			}
			p := acc.sample(now+cfg.Tick, cfg.Sample, capacity)
			p.Configured, p.Effective = float64(info.Config.ConcurrencyLimit), float64(info.Status.EffectiveConcurrencyLimit)
			tr.Points = append(tr.Points, p)
			acc = Point{}
		}
	}
	return tr, nil
}
