//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// Without process groups or signals to pass on, the command is stopped
// after a loss by killing it; an interrupt is passed on as a kill too.
var forwarded = []os.Signal{os.Interrupt}

var sigTerm, sigKill os.Signal = os.Kill, os.Kill

func ownGroup(*exec.Cmd) {}

func signalGroup(pid int, _ os.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill() // an error: gone already, nothing to stop
	}
}

func groupAlive(int) bool { return false }

func killedBy(*os.ProcessState) (int, bool) { return 0, false }

func signalNumber(os.Signal) int { return 2 }
