package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/server"
)

// Scenario is a run: a Tollgate server and an HTTP backend on loopback,
// and Processes client processes of Goroutines goroutines each.
type Scenario struct {
	Pool                  limiter.PoolConfig
	Phases                []Phase
	Processes, Goroutines int
	// Service is the backend's mean service time; Timeout a request's.
	Service, Timeout time.Duration
	// MarkEventInterval is the server's (server.Config).
	MarkEventInterval time.Duration
}

// Issue15 is the run of issue 15 (and of the simulator's DefaultFastFail):
// a pool of concurrency 16 with adaptive limits (window 5s, threshold 0.1,
// 20 samples, backoff 0.8, +1 every 2s), 3 processes of 8 goroutines, and
// a backend that serves 4 requests at once (20ms each on average) and
// answers 503 at once to the rest, then serves only 2, hangs for 15s, and
// heals.
func Issue15() Scenario {
	return Scenario{
		Pool: limiter.PoolConfig{Name: "backend", ConcurrencyLimit: 16, OverloadMark: 20,
			Adaptive: limiter.AdaptiveConfig{Enabled: true, Window: 5 * time.Second, ErrorThreshold: 0.1, MinSamples: 20,
				Backoff: 0.8, Increase: 1.0 / 16, Interval: 2 * time.Second}},
		Phases: []Phase{
			{Until: 90 * time.Second, Capacity: 4, Name: "4 in flight"},
			{Until: 110 * time.Second, Capacity: 2, Name: "degraded: 2"},
			{Until: 125 * time.Second, Capacity: 0, Name: "hung"},
			{Until: 180 * time.Second, Capacity: 4, Name: "healed: 4"},
		},
		Processes: 3, Goroutines: 8,
		Service: 20 * time.Millisecond, Timeout: time.Second,
	}
}

// Short is Issue15's first phase, cut to 16s: long enough for the five
// cuts from 16 to 4.
func Short() Scenario {
	sc := Issue15()
	sc.Phases = []Phase{{Until: 16 * time.Second, Capacity: 4, Name: "4 in flight"}}
	return sc
}

// Sample is the pool's effective concurrency limit at T since the start.
type Sample struct {
	T         time.Duration
	Effective int64
}

// Result is what a run saw.
type Result struct {
	Scenario Scenario
	// Start is when the run started (the backend's time 0).
	Start time.Time
	// Samples of the effective limit, every SampleEvery.
	Samples []Sample
	// Ticks are the backend's counts, one per Tick of the run, by when
	// each request came.
	Ticks []Second
	// Events counts the pool's events recorded by the server, by type;
	// Suppressed the mark events it counted but did not record. Log has
	// the events, oldest first.
	Events     map[string]int
	Log        []events.Event
	Suppressed map[string]int64
	// Clients sums the client processes' outcomes; Reported is what the
	// pool counted from their releases.
	Clients, Reported Outcomes
}

// SampleEvery is the period of Result.Samples.
const SampleEvery = 100 * time.Millisecond

// Run runs sc. command returns the command of one client process given
// its arguments (the test binary or this program, run as "clients").
// Progress goes to log, one line a second.
func Run(ctx context.Context, sc Scenario, command func(args []string) *exec.Cmd, log io.Writer) (Result, error) {
	tg := server.New(server.Config{MarkEventInterval: sc.MarkEventInterval})
	if _, err := tg.Engine().CreatePool(sc.Pool); err != nil {
		return Result{}, err
	}
	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	gs := tg.GRPCServer()
	go func() { _ = gs.Serve(glis) }()
	defer func() {
		gs.Stop()
		tg.Close()
	}()
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	be := newBackend(sc.Phases, sc.Service, sc.Timeout)
	hs := &http.Server{Handler: be}
	go func() { _ = hs.Serve(hlis) }()
	defer hs.Close()

	// The run starts when every client process is ready to send: how long
	// processes take to start is not part of it.
	end := sc.Phases[len(sc.Phases)-1].Until
	type proc struct {
		cmd      *exec.Cmd
		goAhead  io.WriteCloser
		stdout   *bufio.Reader
		out, err bytes.Buffer
	}
	procs := make([]*proc, sc.Processes)
	for i := range procs {
		p := &proc{cmd: command([]string{"clients", "-tollgate", glis.Addr().String(), "-backend", "http://" + hlis.Addr().String() + "/",
			"-pool", sc.Pool.Name, "-goroutines", strconv.Itoa(sc.Goroutines), "-duration", end.String(), "-timeout", sc.Timeout.String()})}
		p.cmd.Stderr = &p.err
		if p.goAhead, err = p.cmd.StdinPipe(); err != nil {
			return Result{}, err
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			return Result{}, err
		}
		p.stdout = bufio.NewReader(stdout)
		if err := p.cmd.Start(); err != nil {
			return Result{}, err
		}
		defer func() { _ = p.cmd.Process.Kill() }() // if the run ends early
		procs[i] = p
	}
	for i, p := range procs {
		if line, err := p.stdout.ReadString('\n'); line != readyLine {
			_ = p.cmd.Wait()
			return Result{}, fmt.Errorf("client process %d printed %q before starting (%v)\n%s", i, line, err, p.err.String())
		}
	}
	start := time.Now()
	be.begin(start)
	for _, p := range procs {
		_ = p.goAhead.Close()
	}
	var wg sync.WaitGroup
	waitErrs := make([]error, len(procs))
	for i, p := range procs {
		wg.Go(func() {
			_, _ = io.Copy(&p.out, p.stdout) // all of it before Wait
			waitErrs[i] = p.cmd.Wait()
		})
	}

	res := Result{Scenario: sc, Start: start, Events: map[string]int{}, Suppressed: map[string]int64{}}
	var lastSeq uint64
	tick := time.NewTicker(SampleEvery)
	for now := time.Since(start); now < end; now = time.Since(start) {
		select {
		case <-ctx.Done():
			for _, p := range procs {
				_ = p.cmd.Process.Kill()
			}
			wg.Wait()
			return res, ctx.Err()
		case <-tick.C:
		}
		info, err := tg.Engine().GetPool(sc.Pool.Name)
		if err != nil {
			return res, err
		}
		t := time.Since(start)
		res.Samples = append(res.Samples, Sample{T: t, Effective: info.Status.EffectiveConcurrencyLimit})
		lastSeq = res.addEvents(tg.RecentEvents(), lastSeq)
		if len(res.Samples)%int(time.Second/SampleEvery) == 0 && log != nil {
			s := be.second(int(t/time.Second) - 1)
			fmt.Fprintf(log, "%5.1fs effective %2d  requests %4d  503 %4d  hung %3d  held %2d waiting %2d\n",
				t.Seconds(), info.Status.EffectiveConcurrencyLimit, s.Requests(), s.Refused, s.Hung, info.Status.Held, info.Status.Waiting)
		}
	}
	tick.Stop()
	wg.Wait()
	for i, p := range procs {
		if waitErrs[i] != nil {
			return res, fmt.Errorf("client process %d: %v\n%s", i, waitErrs[i], p.err.String())
		}
		var o Outcomes
		if err := json.Unmarshal(p.out.Bytes(), &o); err != nil {
			return res, fmt.Errorf("client process %d printed %q: %v", i, p.out.String(), err)
		}
		res.Clients.Success += o.Success
		res.Clients.Error += o.Error
		res.Clients.Timeout += o.Timeout
		res.Clients.Canceled += o.Canceled
	}
	res.Ticks = be.Ticks()
	info, err := tg.Engine().GetPool(sc.Pool.Name)
	if err != nil {
		return res, err
	}
	res.addEvents(tg.RecentEvents(), lastSeq)
	st := info.Status
	res.Reported = Outcomes{Success: st.SuccessesReported, Error: st.ErrorsReported, Timeout: st.TimeoutsReported}
	for _, t := range []limiter.PoolEventType{limiter.PoolOverload, limiter.PoolDrained, limiter.PoolNearFull, limiter.PoolLowUtilisation} {
		res.Suppressed[t.String()] = st.SuppressedMarkEvents.Of(t)
	}
	return res, nil
}

// addEvents adds the events of the pool in evs (newest first) after seq,
// and returns the newest seq.
func (r *Result) addEvents(evs []events.Event, seq uint64) uint64 {
	newest := seq
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Seq <= seq {
			continue
		}
		newest = max(newest, ev.Seq)
		if ev.Pool == r.Scenario.Pool.Name {
			r.Events[ev.Type]++
			r.Log = append(r.Log, ev)
		}
	}
	return newest
}

// ErrorRate returns the backend's 503s and hung requests over all its
// requests in the ticks (from, to].
func (r Result) ErrorRate(from, to time.Duration) float64 {
	reqs, errs := r.Requests(from, to)
	if reqs == 0 {
		return 0
	}
	return float64(errs) / float64(reqs)
}

// Requests returns the backend's requests in the ticks (from, to], and
// the 503s and hung requests among them.
func (r Result) Requests(from, to time.Duration) (reqs, errs int64) {
	for i, s := range r.Ticks {
		if t := time.Duration(i+1) * Tick; t > from && t <= to {
			reqs += s.Requests()
			errs += s.Refused + s.Hung
		}
	}
	return reqs, errs
}

// MeanEffective returns the mean effective limit over the samples in
// (from, to].
func (r Result) MeanEffective(from, to time.Duration) float64 {
	var n, sum float64
	for _, s := range r.Samples {
		if s.T > from && s.T <= to {
			n++
			sum += float64(s.Effective)
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// FirstEvent returns how long after the start the pool first recorded
// an event of type typ, and false if it never did.
func (r Result) FirstEvent(typ string) (time.Duration, bool) {
	for _, ev := range r.Log {
		if ev.Type == typ {
			return ev.Time.Sub(r.Start), true
		}
	}
	return 0, false
}

// FirstAt returns how long after from the effective limit was first at
// most v (below) or at least v (!below), and false if it never was.
func (r Result) FirstAt(from time.Duration, v int64, below bool) (time.Duration, bool) {
	for _, s := range r.Samples {
		if s.T > from && (below && s.Effective <= v || !below && s.Effective >= v) {
			return s.T - from, true
		}
	}
	return 0, false
}
