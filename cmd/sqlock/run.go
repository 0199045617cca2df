package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/pgident"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/redislock"
)

// Exit codes of sqlock run besides the command's own. The command's codes
// pass through, so sqlock's are kept out of the range commands use: small
// numbers are theirs, 123 is xargs's, 124 timeout(1)'s, 126 and 127 the
// shell's (kept here with the shell's meaning), 128+N a death by signal N.
// 125 is what env, nohup, nice and timeout exit with when they themselves
// fail.
const (
	exitRunNotAcquired = 121 // held by someone else: --wait 0 found it held, or the wait ran out
	exitRunLost        = 122 // the lock was lost while the command ran; the command was stopped
	exitRunFailed      = 125 // sqlock run itself failed before the command ran: usage, connection, backend
	exitRunNoExec      = 126 // the command was found but could not be run
	exitRunNotFound    = 127 // the command was not found
	exitRunSignal      = 128 // + N: the command (or sqlock, while waiting) was killed by signal N
)

// The variables the command finds in its environment. Inherited values are
// removed first, so a nested sqlock run never shows its parent's token.
const (
	envName    = "SQLOCK_NAME"    // the lock's name
	envBackend = "SQLOCK_BACKEND" // lease, advisory or redis
	envToken   = "SQLOCK_TOKEN"   // the fencing token, in decimal; unset for advisory
)

const runUsage = `usage: sqlock run --name NAME [flags] [--] COMMAND [ARG]...

Runs COMMAND while holding the lock NAME, the cluster-wide flock(1): at most
one COMMAND per name runs at a time, on any host that shares the database
(or Redis). The lock is released when COMMAND exits.

  --name NAME        the lock's name (required)
  --backend B        lease (default; a TTL lease with a fencing token),
                     advisory (a session advisory lock: no TTL, no token) or
                     redis (a Redis lock with a fencing token)
  --ttl 30s          lease and redis: the lock's TTL, renewed every TTL/3
  --wait 10s         how long to wait for the lock; 0 tries once (flock -n)
  --grace 10s        after a loss, how long COMMAND has between SIGTERM and
                     SIGKILL
  --holder LABEL     lease and redis: who holds the lock, as sqlock leases
                     shows it (default "HOST pid PID: COMMAND")
  --dsn DSN          lease and advisory: the database (default $DATABASE_URL)
  --table T          lease: the lease table (default sqlock_leases), made if
                     missing
  --redis ADDR       redis: host:port or redis:// URL (default $REDIS_URL)

COMMAND's environment has SQLOCK_NAME, SQLOCK_BACKEND and, for lease and
redis, SQLOCK_TOKEN: the fencing token, larger than every earlier holder's.

COMMAND runs in a process group of its own. Signals sent to sqlock run
(INT, TERM, HUP, QUIT, USR1, USR2, WINCH) are passed on to that group, but
one sqlock run was started with ignored (nohup's HUP) stays ignored. When
the lock is lost, the group gets SIGTERM, then SIGKILL after --grace.

Exit codes:
  COMMAND's own   COMMAND ran and exited (128+N: killed by signal N)
  121             not acquired: the lock is held (--wait 0) or the wait ran out
  122             lost: the lock was lost while COMMAND ran (it was stopped),
                  or its release found it no longer held
  125             sqlock run failed: bad usage, cannot connect, backend error
  126             COMMAND cannot be run; 127 COMMAND not found
  128+N           sqlock run was killed by signal N while waiting
`

// runOptions are sqlock run's flags.
type runOptions struct {
	name, backend, dsn, table, redis string
	holder                           string
	ttl, wait, grace                 time.Duration
	command                          []string
}

func parseRun(args []string, e env) (runOptions, bool, error) {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.name, "name", "", "")
	fs.StringVar(&o.backend, "backend", "lease", "")
	fs.DurationVar(&o.ttl, "ttl", 30*time.Second, "")
	fs.DurationVar(&o.wait, "wait", 10*time.Second, "")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "")
	fs.StringVar(&o.dsn, "dsn", "", "")
	fs.StringVar(&o.table, "table", lease.DefaultTable, "")
	fs.StringVar(&o.redis, "redis", "", "")
	fs.StringVar(&o.holder, "holder", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.command = fs.Args()
	if o.dsn == "" {
		o.dsn = e.getenv("DATABASE_URL")
	}
	if o.redis == "" {
		o.redis = e.getenv("REDIS_URL")
	}
	switch {
	case o.name == "":
		return o, false, errors.New("--name is required")
	case len(o.command) == 0:
		return o, false, errors.New("no command: give it after --name NAME --")
	case o.wait < 0:
		return o, false, errors.New("--wait must not be negative (0 tries once)")
	case o.grace < 0:
		return o, false, errors.New("--grace must not be negative")
	case o.ttl <= 0:
		return o, false, errors.New("--ttl must be positive")
	}
	switch o.backend {
	case "lease":
		if set["redis"] {
			return o, false, errors.New("--redis is for --backend redis")
		}
	case "advisory":
		if set["ttl"] {
			return o, false, errors.New("--ttl does not apply to --backend advisory: an advisory lock lasts as long as its connection")
		}
		if set["table"] || set["redis"] || set["holder"] {
			return o, false, errors.New("--table, --redis and --holder do not apply to --backend advisory")
		}
	case "redis":
		if set["dsn"] || set["table"] {
			return o, false, errors.New("--dsn and --table do not apply to --backend redis")
		}
		if o.redis == "" {
			return o, false, errors.New("no Redis: give --redis or set REDIS_URL")
		}
	default:
		return o, false, fmt.Errorf("unknown --backend %q (lease, advisory or redis)", o.backend)
	}
	if !set["holder"] {
		o.holder = defaultHolder(o.command)
	}
	return o, false, nil
}

// defaultHolder labels a lock with where it is held and for what, cut to
// what a label may hold.
func defaultHolder(command []string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	label := fmt.Sprintf("%s pid %d: %s", host, os.Getpid(), strings.Join(command, " "))
	return strings.ToValidUTF8(label[:min(len(label), lease.MaxHolderLen)], "") // a rune cut in two is dropped
}

// runUnderLock is sqlock run. It returns the exit code itself: the command's own
// codes pass through, and sqlock's own are those above, never the other
// subcommands' 1 to 5, which a command's could not be told from.
func runUnderLock(ctx context.Context, args []string, e env) int {
	o, help, err := parseRun(args, e)
	if help {
		fmt.Fprint(e.stderr, runUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sqlock run: %v (sqlock run --help)\n", err)
		return exitRunFailed
	}
	// Found before the lock is taken: a typo costs no one a wait.
	cmd := exec.Command(o.command[0], o.command[1:]...)
	if cmd.Err != nil {
		fmt.Fprintln(e.stderr, "sqlock run:", cmd.Err)
		return startFailure(cmd.Err)
	}

	// Signals are caught from the start: while waiting for the lock one
	// ends the wait; once the command runs each is passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, caught...)
	defer signal.Stop(sigs)

	// The lock outlives ctx, which main cancels on the first SIGINT: that
	// signal is the command's to handle, through sigs.
	base := context.WithoutCancel(ctx)
	b, err := openBackend(base, o, e)
	if err != nil {
		fmt.Fprintln(e.stderr, "sqlock run:", err)
		return exitRunFailed
	}
	defer b.close()

	lk, sig, err := acquire(base, b, o, sigs)
	switch {
	case sig != nil:
		fmt.Fprintf(e.stderr, "sqlock run: %v while waiting for %q\n", sig, o.name)
		return exitRunSignal + signalNumber(sig)
	case errors.Is(err, sqlock.ErrNotAcquired), errors.Is(err, sqlock.ErrTimeout):
		fmt.Fprintf(e.stderr, "sqlock run: %q not acquired: %v\n", o.name, err)
		return exitRunNotAcquired
	case err != nil:
		fmt.Fprintf(e.stderr, "sqlock run: acquiring %q: %v\n", o.name, err)
		return exitRunFailed
	}

	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = childEnv(os.Environ(), o, lk)
	ownGroup(cmd)
	code, lost := supervise(cmd, lk, o, sigs, e.stderr)
	if !lost && lk.Err() != nil {
		// Lost as the command exited, before supervise saw it.
		fmt.Fprintf(e.stderr, "sqlock run: lock %q lost as the command ended: %v\n", o.name, lk.Err())
		lost = true
	}

	rctx, cancel := context.WithTimeout(base, 10*time.Second)
	defer cancel()
	if err := lk.Release(rctx); err != nil && !lost {
		if errors.Is(err, sqlock.ErrLost) || errors.Is(err, lease.ErrNotHeld) || errors.Is(err, redislock.ErrNotHeld) {
			// The command ran to its end, but not all of it under the
			// lock: someone else may have held it meanwhile.
			fmt.Fprintf(e.stderr, "sqlock run: %q was no longer held at release: %v\n", o.name, err)
			return exitRunLost
		}
		// Not confirmed, but never seen lost: the command ran under the
		// lock, and a TTL lock expires by itself.
		fmt.Fprintf(e.stderr, "sqlock run: releasing %q: %v\n", o.name, err)
	}
	if lost {
		return exitRunLost
	}
	return code
}

// caught are the forwarded signals this process was not started with
// ignored, read before main catches any. One that was ignored — nohup's
// SIGHUP — stays ignored, here and in the command, which inherits that:
// catching it would pass the hangup nohup keeps away on to the command.
var caught = func() []os.Signal {
	var c []os.Signal
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			c = append(c, s)
		}
	}
	return c
}()

// startFailure is the exit code of a command that could not be started,
// as the shell reports it.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitRunNotFound
	}
	return exitRunNoExec
}

// supervise starts the command and waits for it, passing signals on and
// stopping it if the lock is lost. It returns the command's exit code and
// whether the lock was lost while it ran.
func supervise(cmd *exec.Cmd, lk sqlock.Lock, o runOptions, sigs <-chan os.Signal, stderr io.Writer) (code int, lost bool) {
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "sqlock run:", err)
		return startFailure(err), false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid := cmd.Process.Pid
	lostCh := lk.Lost()
	var kill <-chan time.Time
	for {
		select {
		case err := <-done:
			if lost && kill != nil && groupAlive(pid) {
				// The command is gone, and what it started is still in its
				// group: it gets the rest of the grace period too.
				<-kill
				signalGroup(pid, sigKill)
			}
			return exitStatus(cmd, err), lost
		case s := <-sigs:
			signalGroup(pid, s)
		case <-lostCh:
			lostCh, lost = nil, true
			fmt.Fprintf(stderr, "sqlock run: lock %q lost (%v): stopping the command: SIGTERM, SIGKILL after %s\n",
				o.name, lk.Err(), o.grace)
			signalGroup(pid, sigTerm)
			kill = time.After(o.grace)
		case <-kill:
			kill = nil
			signalGroup(pid, sigKill)
		}
	}
}

// exitStatus is the command's exit code as a shell reports it: its own, or
// 128+N after a death by signal N.
func exitStatus(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return exitRunNoExec
	}
	if n, ok := killedBy(ps); ok {
		return exitRunSignal + n
	}
	if err != nil && ps.ExitCode() < 0 {
		return exitRunNoExec
	}
	return ps.ExitCode()
}

// acquire takes the lock, giving up when a signal arrives: then it returns
// the signal, with nothing held.
func acquire(ctx context.Context, b *runBackend, o runOptions, sigs <-chan os.Signal) (sqlock.Lock, os.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lk  sqlock.Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		var r result
		if o.wait == 0 {
			r.lk, r.err = b.acq.TryAcquire(ctx, o.name)
		} else {
			r.lk, r.err = b.acq.Acquire(ctx, o.name)
		}
		res <- r
	}()
	select {
	case r := <-res:
		return r.lk, nil, r.err
	case s := <-sigs:
		cancel()
		if r := <-res; r.err == nil {
			rctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer stop()
			r.lk.Release(rctx) // nothing ran under it: whether it was confirmed changes nothing
		}
		return nil, s, nil
	}
}

// runBackend is the Acquirer of --backend, over its own connections.
type runBackend struct {
	acq   sqlock.Acquirer
	close func()
}

func openBackend(ctx context.Context, o runOptions, e env) (*runBackend, error) {
	if o.backend == "redis" {
		return openRedis(ctx, o)
	}
	db, err := open(ctx, o.dsn, e)
	if err != nil {
		return nil, err
	}
	// A lease waiter listens on one connection while it tries on another;
	// an advisory lock pins one and its keepalive runs on it.
	db.SetMaxOpenConns(4)
	b := &runBackend{close: func() { db.Close() }}
	switch o.backend {
	case "advisory":
		var opts []advisory.Option
		if o.wait > 0 {
			opts = append(opts, advisory.WithTimeout(o.wait))
		}
		b.acq = advisory.New(db, opts...).Acquirer()
	default:
		if err := ensureLeaseTable(ctx, db, o.table); err != nil {
			db.Close()
			return nil, err
		}
		opts := []lease.Option{lease.WithTable(o.table), lease.WithHolder(o.holder)}
		if o.wait > 0 {
			opts = append(opts, lease.WithTimeout(o.wait))
		}
		b.acq = lease.New(db, opts...).Acquirer(o.ttl)
	}
	return b, nil
}

// ensureLeaseTable makes the lease table if it is missing. Migrate is not
// run on a table that exists: it would alter one an older version made,
// which a role that only uses the table may not do.
func ensureLeaseTable(ctx context.Context, db *sql.DB, table string) error {
	t, err := pgident.ParseTable("--table", table, pgident.MaxLen)
	if err != nil {
		return err
	}
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", t.String()).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	return lease.Migrate(ctx, db, lease.WithTable(table))
}

// quiet drops go-redis's own log lines (each failed dial): the command's
// stderr is the caller's, and a failure is reported once, by sqlock run.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func openRedis(ctx context.Context, o runOptions) (*runBackend, error) {
	redis.SetLogger(quiet{}) // a program's setting: this process is sqlock's own
	opts := &redis.Options{Addr: o.redis}
	if strings.Contains(o.redis, "://") {
		var err error
		if opts, err = redis.ParseURL(o.redis); err != nil {
			return nil, usageError{"bad --redis URL: " + err.Error()}
		}
	}
	client := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, connectError{"redis " + opts.Addr, err}
	}
	lopts := []redislock.Option{redislock.WithHolder(o.holder)}
	if o.wait > 0 {
		lopts = append(lopts, redislock.WithTimeout(o.wait))
	}
	return &runBackend{
		acq:   redislock.New(client, lopts...).Acquirer(o.ttl),
		close: func() { client.Close() },
	}, nil
}

// childEnv is the command's environment: the caller's, without inherited
// SQLOCK_ variables, and this lock's.
func childEnv(environ []string, o runOptions, lk sqlock.Lock) []string {
	env := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k != envName && k != envBackend && k != envToken {
			env = append(env, kv)
		}
	}
	env = append(env, envName+"="+o.name, envBackend+"="+o.backend)
	if f, ok := lk.(sqlock.Fenced); ok {
		env = append(env, envToken+"="+strconv.FormatInt(f.Token(), 10))
	}
	return env
}
