package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/poolconv"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// adaptiveConfigRows prints a pool's safe rate and adaptive settings.
func adaptiveConfigRows(row func(string, any), pool *tollgatev1.Pool) {
	if pool.GetRate() != 0 {
		row("safe_rate", strconv.FormatFloat(pool.GetSafeRate(), 'g', -1, 64)+"/s")
	}
	a := pool.GetAdaptive()
	if !a.GetEnabled() {
		row("adaptive", "off")
		return
	}
	target := poolconv.EnumText(a.GetTarget())
	var floors []string
	if pool.GetConcurrencyLimit() != 0 {
		floors = append(floors, "concurrency "+strconv.FormatInt(a.GetMinConcurrency(), 10))
	}
	if pool.GetRate() != 0 {
		floors = append(floors, "rate "+fmtRate(a.GetMinRate())+"/s")
	}
	latency := "off"
	if t := a.GetLatencyTolerance(); t > 0 {
		latency = strconv.FormatFloat(t, 'g', -1, 64) + "× baseline"
	}
	row("adaptive", fmt.Sprintf("on: target %s; cut ×%g when errors+timeouts > %g%% of ≥%d outcomes in %v (at most every %v); raise +%g%% per %v (per %v to where one failed); floors %s; latency %s",
		target, a.GetBackoff(), 100*a.GetErrorThreshold(), a.GetMinSamples(), duration(a.GetWindow()), duration(a.GetCooldown()),
		100*a.GetIncrease(), duration(a.GetInterval()), duration(a.GetProbeInterval()), strings.Join(floors, ", "), latency))
}

// adaptiveStatusRows prints a pool's effective limits beside its
// configured ones, the outcomes reported, the adaptive window and the
// rate shares.
func adaptiveStatusRows(row func(string, any), pool *tollgatev1.Pool, st *tollgatev1.PoolStatus) {
	throttled := ""
	if r := st.GetThrottleReason(); r != tollgatev1.ThrottleReason_THROTTLE_REASON_UNSPECIFIED {
		throttled = " (throttled: " + strings.ToLower(strings.TrimPrefix(r.String(), "THROTTLE_REASON_")) + ")"
	}
	if c := pool.GetConcurrencyLimit(); c != 0 {
		row("effective_concurrency_limit", fmt.Sprintf("%d of configured %d%s", st.GetEffectiveConcurrencyLimit(), c, throttled))
	}
	if r := pool.GetRate(); r != 0 {
		row("effective_rate", fmt.Sprintf("%s/s of configured %s/s%s", fmtRate(st.GetEffectiveRate()), fmtRate(r), throttled))
	}
	if st.GetLastAdaptiveChange() != nil {
		row("last_adaptive_change", timestamp(st.GetLastAdaptiveChange()))
	}
	row("outcomes_reported", fmt.Sprintf("%d successes, %d errors, %d timeouts", st.GetSuccessesReported(), st.GetErrorsReported(), st.GetTimeoutsReported()))
	if pool.GetAdaptive().GetEnabled() {
		w := fmt.Sprintf("%d outcomes, %.1f%% errors or timeouts", st.GetWindowSamples(), 100*st.GetWindowErrorRatio())
		if st.GetWindowLatency() != nil {
			w += ", mean latency " + duration(st.GetWindowLatency())
		}
		if st.GetLatencyBaseline() != nil {
			w += " (baseline " + duration(st.GetLatencyBaseline()) + ")"
		}
		row("adaptive_window", w)
	}
	if pool.GetRate() != 0 {
		row("rate_shares", fmt.Sprintf("%d holding %s/s", st.GetShareHolders(), fmtRate(st.GetSharesGranted())))
	}
}

// fmtRate formats a rate with at most 3 decimals.
func fmtRate(r float64) string {
	return strconv.FormatFloat(float64(int64(r*1000+0.5))/1000, 'f', -1, 64)
}
