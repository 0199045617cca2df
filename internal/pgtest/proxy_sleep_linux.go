package pgtest

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preciseSleep sleeps about d in the kernel, on a thread whose timer slack
// is 1 ns (Linux adds 50 µs by default): a 250 µs sleep takes about 270 µs
// instead of the runtime timers' 1 ms.
func preciseSleep(d time.Duration) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil) // woken early (EINTR), the caller sleeps again
}
