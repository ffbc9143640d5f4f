// Package adaptivesim is a deterministic simulation of adaptive limits: a
// Tollgate engine on a fake clock, a model of a protected backend that
// fails when it is driven near and above its true capacity, and clients
// that take exact rate tokens from the engine, send requests to the
// backend and report the outcomes as the Go client does. Nothing sleeps;
// the randomness is seeded. The tests of this package check that the
// effective rate converges below the backend's capacity, that errors fall,
// and that the limit recovers when the backend heals; the trace is drawn
// as docs/adaptive-trace.svg (see Trace.WriteSVG).
package adaptivesim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
)

// Phase is a stretch of time during which the backend has one capacity.
type Phase struct {
	// Until is the end of the phase, from the start of the run.
	Until time.Duration
	// Capacity is the backend's true capacity in requests per second.
	Capacity float64
	// Name labels the phase on the chart.
	Name string
}

// Config describes a run.
type Config struct {
	// Pool is the pool the clients take tokens from (it must have a rate).
	Pool limiter.PoolConfig
	// Clients, each offering OfferedPerClient requests per second.
	Clients          int
	OfferedPerClient float64
	// Phases of the backend, in order; the run ends with the last.
	Phases []Phase
	// Tick is the simulation step; ReportEvery how often each client
	// sends its counted outcomes (the Go client: every second); Sample
	// the trace's resolution.
	Tick, ReportEvery, Sample time.Duration
	// Timeout is the clients' timeout for a backend request; BaseErrors
	// the backend's error probability when it is not loaded.
	Timeout    time.Duration
	BaseErrors float64
	// Seed of the random outcomes.
	Seed uint64
}

// DefaultConfig is the run of docs/adaptive-trace.svg: a pool configured
// at 400 requests per second (an over-estimate) with adaptive limits at
// their defaults, five clients offering 100 per second each, and a
// backend whose true capacity is 200 per second, then degrades to 120,
// then heals to 500 (above the configured rate).
func DefaultConfig() Config {
	return Config{
		Pool: limiter.PoolConfig{Name: "backend", Rate: 400, Burst: 40,
			Adaptive: limiter.AdaptiveConfig{Enabled: true}},
		Clients:          5,
		OfferedPerClient: 100,
		Phases: []Phase{
			{Until: 70 * time.Second, Capacity: 200, Name: "capacity 200/s"},
			{Until: 110 * time.Second, Capacity: 120, Name: "degraded: 120/s"},
			{Until: 180 * time.Second, Capacity: 500, Name: "healed: 500/s"},
		},
		Tick:        10 * time.Millisecond,
		ReportEvery: time.Second,
		Sample:      time.Second,
		Timeout:     200 * time.Millisecond,
		BaseErrors:  0.005,
		Seed:        1,
	}
}

// Point is one sample of the trace: rates in requests per second, over
// the sample's interval (the limits at its end).
type Point struct {
	T          time.Duration
	Configured float64 // the pool's configured rate
	Effective  float64 // its effective rate
	Offered    float64 // requests the clients wanted to send
	Admitted   float64 // requests that got a token and reached the backend
	Capacity   float64 // the backend's true capacity
	Errors     float64 // errors and timeouts
	ErrorRate  float64 // Errors / Admitted
	Latency    time.Duration
}

// Trace is the result of a run.
type Trace struct {
	Config Config
	// Pool is the pool's configuration as the engine stored it, with
	// the adaptive defaults filled in.
	Pool   limiter.PoolConfig
	Points []Point
	// Events are adaptive control's changes (PoolThrottled, PoolRelieved).
	Events []limiter.PoolEvent
	// Compare, when set, is another run of the same backend drawn with
	// this one, named CompareName: the chart's effective rate and error
	// rate of it, lighter.
	Compare     []Point
	CompareName string
}

// backend is the model of the protected system: a single queue served at
// its capacity (M/M/1), loaded by the requests of the last second or so
// (an exponentially weighted mean of the admitted rate, time constant
// loadMemory). A request's time in the system is exponential with mean
// 1/(capacity − load): it times out (after Config.Timeout) with
// probability exp(−(capacity − load) × timeout), and always when the load
// reaches the capacity; otherwise it fails with the base error rate. So
// timeouts appear before the true capacity is reached and grow sharply
// past it, as they do for a real server whose queue builds up.
type backend struct {
	timeout float64 // seconds
	base    float64
}

// loadMemory is the time constant of the backend's load.
const loadMemory = time.Second

// outcome draws the outcome of one request at load (requests per second)
// with capacity, and its latency.
func (b backend) outcome(rng *rand.Rand, load, capacity float64) (limiter.Outcome, time.Duration) {
	slack := capacity - load
	if slack <= 0 {
		return limiter.OutcomeTimeout, time.Duration(b.timeout * float64(time.Second))
	}
	// The time in the system, drawn from its exponential distribution.
	t := rng.ExpFloat64() / slack
	if t > b.timeout {
		return limiter.OutcomeTimeout, time.Duration(b.timeout * float64(time.Second))
	}
	lat := time.Duration(t * float64(time.Second))
	if rng.Float64() < b.base {
		return limiter.OutcomeError, lat
	}
	return limiter.OutcomeSuccess, lat
}

// Run simulates cfg and returns its trace.
func Run(cfg Config) (Trace, error) {
	if cfg.Clients < 1 || cfg.Tick <= 0 || cfg.Sample < cfg.Tick || cfg.ReportEvery < cfg.Tick || len(cfg.Phases) == 0 {
		return Trace{}, fmt.Errorf("adaptivesim: bad config %+v", cfg)
	}
	tr := Trace{Config: cfg}
	e, clk, err := tr.start(cfg.Pool)
	if err != nil {
		return Trace{}, err
	}
	defer e.Close()
	name := cfg.Pool.Name
	rng := newRand(cfg.Seed)
	be := backend{timeout: cfg.Timeout.Seconds(), base: cfg.BaseErrors}
	ctx := context.Background()

	pending := make([]limiter.OutcomeReport, cfg.Clients) // counted, not yet reported
	owed := make([]float64, cfg.Clients)                  // fractional requests carried between ticks
	end := cfg.Phases[len(cfg.Phases)-1].Until
	var acc Point
	var latSum time.Duration
	var latN int64
	var load float64 // requests per second, smoothed
	reportTicks := int(cfg.ReportEvery / cfg.Tick)
	sampleTicks := int(cfg.Sample / cfg.Tick)
	for tick := 0; time.Duration(tick)*cfg.Tick < end; tick++ {
		now := time.Duration(tick) * cfg.Tick
		capacity := capacityAt(cfg.Phases, now)
		// Each client offers its requests; those that get a token reach
		// the backend. Clients take turns request by request.
		var admitted []int // client of each admitted request
		wants := make([]int, cfg.Clients)
		for c := range wants {
			owed[c] += cfg.OfferedPerClient * cfg.Tick.Seconds()
			wants[c] = int(owed[c])
			owed[c] -= float64(wants[c])
			acc.Offered += float64(wants[c])
		}
		for more := true; more; {
			more = false
			for c := range wants {
				if wants[c] == 0 {
					continue
				}
				wants[c]--
				more = true
				if _, err := e.Take(ctx, name, 1, 0); err == nil {
					admitted = append(admitted, c)
				}
			}
		}
		load += (float64(len(admitted))/cfg.Tick.Seconds() - load) * (1 - math.Exp(-cfg.Tick.Seconds()/loadMemory.Seconds()))
		for _, c := range admitted {
			o, lat := be.outcome(rng, load, capacity)
			count(&pending[c], &acc, o, lat)
			latSum += lat
			latN++
		}
		acc.Admitted += float64(len(admitted))
		// Clients report every ReportEvery, each at its own phase.
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
			p.Configured, p.Effective = info.Config.Rate, info.Status.EffectiveRate
			if latN > 0 {
				p.Latency = latSum / time.Duration(latN)
			}
			tr.Points = append(tr.Points, p)
			acc, latSum, latN = Point{}, 0, 0
		}
	}
	return tr, nil
}

// sample turns acc, the counts of a sample of length d, into the point
// at t: rates per second, the error rate, and the capacity.
func (acc Point) sample(t, d time.Duration, capacity float64) Point {
	secs := d.Seconds()
	p := Point{T: t, Offered: acc.Offered / secs, Admitted: acc.Admitted / secs, Capacity: capacity, Errors: acc.Errors / secs}
	if acc.Admitted > 0 {
		p.ErrorRate = acc.Errors / acc.Admitted
	}
	return p
}

// start creates the engine of a run on a fake clock, with cfg's pool, and
// records adaptive control's events (not the marks') in tr.
func (tr *Trace) start(cfg limiter.PoolConfig) (*limiter.Engine, *fakeclock.Clock, error) {
	clk := fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	e := limiter.New(limiter.Options{Clock: clk, OnPoolEvent: func(ev limiter.PoolEvent) {
		if ev.Type == limiter.PoolThrottled || ev.Type == limiter.PoolRelieved {
			tr.Events = append(tr.Events, ev)
		}
	}})
	info, err := e.CreatePool(cfg)
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	tr.Pool = info.Config
	return e, clk, nil
}

// newRand returns the run's seeded source of randomness.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// count adds an outcome to a client's pending report, and an error or
// timeout to acc.
func count(r *limiter.OutcomeReport, acc *Point, o limiter.Outcome, lat time.Duration) {
	switch o {
	case limiter.OutcomeSuccess:
		r.Successes++
	case limiter.OutcomeError:
		r.Errors++
		acc.Errors++
	default:
		r.Timeouts++
		acc.Errors++
	}
	r.LatencyCount++
	r.LatencySum += lat
	r.LatencyMax = max(r.LatencyMax, lat)
}

// report sends the pending reports of the clients whose turn it is at
// tick: each reports every reportTicks, at its own phase.
func report(e *limiter.Engine, pool string, pending []limiter.OutcomeReport, tick, reportTicks int) error {
	for c := range pending {
		if (tick+c*reportTicks/len(pending))%reportTicks == reportTicks-1 {
			r := pending[c]
			r.Pool = pool
			if err := e.Report([]limiter.OutcomeReport{r}); err != nil {
				return err
			}
			pending[c] = limiter.OutcomeReport{}
		}
	}
	return nil
}

// capacityAt is the backend's capacity at t.
func capacityAt(phases []Phase, t time.Duration) float64 {
	for _, p := range phases {
		if t < p.Until {
			return p.Capacity
		}
	}
	return phases[len(phases)-1].Capacity
}

// Stats summarizes the points of a trace between two times.
type Stats struct {
	MeanEffective, MaxEffective, MeanAdmitted, MeanErrorRate float64
}

// Between summarizes the points with from < T <= to.
func (tr Trace) Between(from, to time.Duration) Stats {
	var s Stats
	var n, admitted, errs float64
	for _, p := range tr.Points {
		if p.T <= from || p.T > to {
			continue
		}
		n++
		s.MeanEffective += p.Effective
		s.MaxEffective = math.Max(s.MaxEffective, p.Effective)
		s.MeanAdmitted += p.Admitted
		admitted += p.Admitted
		errs += p.Errors
	}
	if n > 0 {
		s.MeanEffective /= n
		s.MeanAdmitted /= n
	}
	if admitted > 0 {
		s.MeanErrorRate = errs / admitted
	}
	return s
}

// FirstAtOrBelow returns the time of the first point after from whose
// effective rate is at most v, and false if there is none.
func (tr Trace) FirstAtOrBelow(from time.Duration, v float64) (time.Duration, bool) {
	for _, p := range tr.Points {
		if p.T > from && p.Effective <= v {
			return p.T, true
		}
	}
	return 0, false
}

// FirstAtOrAbove is FirstAtOrBelow for a rate at least v.
func (tr Trace) FirstAtOrAbove(from time.Duration, v float64) (time.Duration, bool) {
	for _, p := range tr.Points {
		if p.T > from && p.Effective >= v {
			return p.T, true
		}
	}
	return 0, false
}
