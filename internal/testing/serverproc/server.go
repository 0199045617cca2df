package serverproc

import (
	"context"
	"fmt"
	"syscall"
)

// Server is a server process owned by a watchdog ([Start]), with the fault
// levers every harness offers: Kill, Start again, Restart, Pause, Resume.
// A harness embeds it and adds what its server has (an endpoint, a
// client, its own commands).
//
// Its watchdog script obeys two lines: "kill", which SIGKILLs the server
// (continuing it first, should it be paused), reaps it and replies "done";
// and "start", which starts it again (on the same port and directory) and
// replies its pid. A script may obey more lines ([Server.Halt]).
type Server struct {
	// Addr is the server's host:port: set by the harness once known (a
	// server that picks its own port reports it after it started).
	Addr string

	name  string // the harness's, beginning every lever's error
	dir   string
	proc  *Proc
	ready func(ctx context.Context) error
}

// NewServer is the server proc runs, in dir, for the harness called name
// ("redistest": its errors begin "redistest: "). ready waits until the
// server answers (a started one, and one started again), and returns an
// error that says why not: it is called by [Server.Start].
func NewServer(name string, proc *Proc, dir string, ready func(ctx context.Context) error) *Server {
	return &Server{name: name, dir: dir, proc: proc, ready: ready}
}

// PID is the server's process id (0 while stopped).
func (s *Server) PID() int { return s.proc.PID() }

// Dir is the server's temporary directory, removed on Close.
func (s *Server) Dir() string { return s.dir }

// Proc is the server's watchdog.
func (s *Server) Proc() *Proc { return s.proc }

// Kill ends the server with SIGKILL (a crash: what it did not persist is
// gone) and waits until it has exited.
func (s *Server) Kill() error { return s.Halt("kill") }

// Halt sends the watchdog the line cmd, which stops the server ("kill",
// or a line of the harness's own script: redistest's "stop" is SIGTERM),
// and waits until it has replied "done". It does nothing while the server
// is stopped.
func (s *Server) Halt(cmd string) error {
	if err := s.proc.Halt(cmd, "done"); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// Start starts a halted server again, on the same port and directory, and
// waits until it answers. It does nothing to a running server.
func (s *Server) Start(ctx context.Context) error {
	started, err := s.proc.Resume("start")
	if err != nil {
		return fmt.Errorf("%s: start: %w", s.name, err)
	}
	if !started {
		return nil
	}
	return s.ready(ctx)
}

// Restart kills the server (SIGKILL) and starts it again.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Pause stops the server with SIGSTOP: connections stay open, nothing is
// answered until Resume.
func (s *Server) Pause() error { return s.Signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.Signal(syscall.SIGCONT) }

// Signal sends sig to the running server.
func (s *Server) Signal(sig syscall.Signal) error {
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// Close kills the server and removes its directory, waiting until both are
// done. Later calls do nothing.
func (s *Server) Close() error { return s.proc.Close() }
