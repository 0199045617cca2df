//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// forwarded are the signals sqlock run passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

var sigTerm, sigKill os.Signal = syscall.SIGTERM, syscall.SIGKILL

// ownGroup makes the command the leader of a process group of its own, so
// that a signal reaches everything it started (a shell script's children
// too: after a loss none may go on), and so that a terminal's Ctrl-C, which
// goes to sqlock's group, reaches the command once, passed on by sqlock,
// not twice. As with timeout(1), the cost is that the command is not the
// terminal's foreground job: one that reads from the terminal is stopped.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends s to the process group led by pid.
func signalGroup(pid int, s os.Signal) {
	if n, ok := s.(syscall.Signal); ok {
		syscall.Kill(-pid, n) // an error is ESRCH: nobody left to stop
	}
}

// groupAlive reports whether a process of pid's group is still running.
func groupAlive(pid int) bool {
	err := syscall.Kill(-pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// killedBy reports the signal that ended a process, if one did.
func killedBy(ps *os.ProcessState) (int, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return int(ws.Signal()), true
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
