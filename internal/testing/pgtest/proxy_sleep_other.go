//go:build !linux

package pgtest

import "time"

// sleeper waits short times (at the runtime timers' resolution outside
// Linux).
type sleeper struct{}

func (*sleeper) sleep(d time.Duration) { time.Sleep(d) }
func (*sleeper) close()                {}
