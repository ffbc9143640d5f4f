package hatest

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// WorkloadEnv is the environment variable through which a worker process
// gets its Workload, as JSON.
const WorkloadEnv = "TOLLGATE_HATEST_WORKLOAD"

// Workload is what one worker process does until its stdin closes.
type Workload struct {
	Worker  string   // its name, and its client id
	Servers []string // the servers' addresses, for client.Dial
	Seed    uint64
	// Margin is the client's safety margin: a holder stops relying on a
	// lease at its expiry minus Margin when it could not renew.
	Margin time.Duration
	Holds  []HoldSpec
	Takes  []TakeSpec
	// Config names the pools this worker changes with UpdatePool (a new
	// concurrency limit each time), one change every ConfigEvery. Each
	// pool must have this one writer, so that its changes have an order.
	Config      []string
	ConfigEvery time.Duration
}

// HoldSpec is a set of goroutines that acquire leases on Pool in a loop.
type HoldSpec struct {
	Pool       string
	Goroutines int
	TTL        time.Duration
	MaxWeight  int64 // weights from 1 to MaxWeight
	// Holds last from MinHold to MaxHold; one in LongEvery (if > 0) lasts
	// from LongMin to LongMax instead, so that leases are held across
	// renewals and faults.
	MinHold, MaxHold time.Duration
	LongEvery        int
	LongMin, LongMax time.Duration
}

// TakeSpec is a set of goroutines that take one token at a time from Pool.
type TakeSpec struct {
	Pool       string
	Goroutines int
}

// LoadWorkload reads the Workload from the environment.
func LoadWorkload() (Workload, error) {
	var w Workload
	s := os.Getenv(WorkloadEnv)
	if s == "" {
		return w, fmt.Errorf("hatest: %s is not set", WorkloadEnv)
	}
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return w, fmt.Errorf("hatest: %s: %w", WorkloadEnv, err)
	}
	return w, nil
}
