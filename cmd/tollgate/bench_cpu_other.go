//go:build !linux

package main

import (
	"os/exec"
	"time"
)

// benchCPU reports that CPU times are not measured on this system.
func benchCPU([]int) (time.Duration, bool) { return 0, false }

// dieWithParent does nothing here: stop the servers by hand if the bench
// is killed.
func dieWithParent(*exec.Cmd) {}

// procRSS reports that resident memory is not measured on this system.
func procRSS(int) (int64, bool) { return 0, false }
