//go:build !linux

package pgtest

import "time"

// preciseSleep sleeps about d (at the runtime timers' resolution outside
// Linux).
func preciseSleep(d time.Duration) { time.Sleep(d) }
