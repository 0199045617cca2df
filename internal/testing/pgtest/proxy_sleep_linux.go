package pgtest

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleeper waits short times precisely: on Linux with a timerfd read through
// the runtime's poller, which wakes when the kernel's high-resolution timer
// fires (a 250 µs wait takes about 260 µs) and holds no thread while it
// waits. The runtime's own timers wake no sooner than about a millisecond
// after they are set when the process is otherwise idle.
type sleeper struct {
	f  *os.File // nil until the first sleep, or when timerfd is unavailable
	fd uintptr
}

type itimerspec struct{ interval, value syscall.Timespec }

func (s *sleeper) sleep(d time.Duration) {
	if s.f == nil {
		fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, 1, // CLOCK_MONOTONIC
			syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if errno != 0 {
			time.Sleep(d)
			return
		}
		s.f, s.fd = os.NewFile(fd, "timerfd"), fd
	}
	spec := itimerspec{value: syscall.NsecToTimespec(int64(d))}
	if _, _, errno := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, s.fd, 0,
		uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := s.f.Read(expirations[:]); err != nil {
		time.Sleep(d)
	}
}

func (s *sleeper) close() {
	if s.f != nil {
		s.f.Close()
	}
}
