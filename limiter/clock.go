package limiter

import "github.com/tollgate/tollgate/limiter/clock"

// Clock is the engine's source of time; see package clock.
type Clock = clock.Clock

// Timer is a pending call made by Clock.AfterFunc; see package clock.
type Timer = clock.Timer

// SystemClock is the Clock of the real world: time.Now and time.AfterFunc.
type SystemClock = clock.System
