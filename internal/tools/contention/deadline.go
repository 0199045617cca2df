package contention

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/pgerror"
	"github.com/sqlock/sqlock/txlock"
)

// Form is one way of running the deadline scenario's critical section: one
// of sqlock's, on one kind of handle, or a hand-written one.
type Form string

// The forms of the deadline scenario. Every form increments the counter row
// by read-then-write with a pg_sleep of the hold time in between, under
// mutual exclusion on one key.
const (
	// FormTxLockSQL is txlock.Do on a *sql.DB of pgx's stdlib driver
	// (stdlib.OpenDB): the lock follows BEGIN as a statement of its own.
	FormTxLockSQL Form = "txlock.Do, *sql.DB (stdlib)"
	// FormTxLockOpenDB is txlock.Do on a *sql.DB from txlock.OpenDB.
	FormTxLockOpenDB Form = "txlock.Do, txlock.OpenDB"
	// FormTxLockPgx is txlock.DoPgx on a *pgxpool.Pool.
	FormTxLockPgx Form = "txlock.DoPgx, pgxpool"
	// FormAdvisoryPool is advisory.Do of a Locker from advisory.NewPool; the
	// critical section runs on the same pool.
	FormAdvisoryPool Form = "advisory.Do, NewPool"
	// FormAdvisorySQL is advisory.Do of a Locker from advisory.New on a
	// *sql.DB (stdlib); the critical section runs on the same *sql.DB.
	FormAdvisorySQL Form = "advisory.Do, New(*sql.DB)"
	// FormHandForUpdate is by hand on pgxpool: BEGIN; SELECT … FOR UPDATE;
	// …; COMMIT.
	FormHandForUpdate Form = "hand: SELECT … FOR UPDATE"
	// FormHandLock is the naive extra-statement lock by hand on pgxpool:
	// BEGIN; SELECT pg_advisory_xact_lock($1); …; COMMIT.
	FormHandLock Form = "hand: pg_advisory_xact_lock"
	// FormHandLockTimeout is the careful hand-written form on pgxpool: as
	// FormHandLock, with lock_timeout set (set_config(…, true), as SET
	// LOCAL) before the lock to the context's remaining time minus what the
	// rest of the call needs (DeadlineResult.HandMargin), so that a wait
	// that runs out ends on the server with 55P03 and the connection
	// survives. Its statements run on a context detached from the caller's
	// cancellation (bounded a second past the deadline), and it rolls back
	// rather than commits once the deadline has passed: a slow machine
	// costs it successes, never connections.
	FormHandLockTimeout Form = "hand: lock_timeout from deadline"
)

// FormTxLockPgxTimeout is txlock.DoPgx on a *pgxpool.Pool with
// txlock.WithTimeout set by the caller to the deadline minus handMargin:
// what txlock's own lock_timeout achieves when the caller does the
// arithmetic. It is not one of DeadlineForms.
const FormTxLockPgxTimeout Form = "txlock.DoPgx+WithTimeout(deadline-m)"

// DeadlineForms lists every form of the deadline scenario, sqlock's first.
var DeadlineForms = []Form{
	FormTxLockSQL, FormTxLockOpenDB, FormTxLockPgx, FormAdvisoryPool, FormAdvisorySQL,
	FormHandForUpdate, FormHandLock, FormHandLockTimeout,
}

// SQLock reports whether f is one of sqlock's forms (not a hand-written
// one).
func (f Form) SQLock() bool {
	switch f {
	case FormHandForUpdate, FormHandLock, FormHandLockTimeout:
		return false
	}
	return true
}

// advisoryForm reports whether f holds a session lock on a connection of
// its own while the critical section needs another one.
func (f Form) advisoryForm() bool { return f == FormAdvisoryPool || f == FormAdvisorySQL }

// sqlForm reports whether f runs on a *sql.DB rather than a pgxpool.
func (f Form) sqlForm() bool {
	return f == FormTxLockSQL || f == FormTxLockOpenDB || f == FormAdvisorySQL
}

// handMargin is what FormHandLockTimeout keeps back from the context's
// remaining time when it sets lock_timeout: the critical section (hold)
// plus 15 ms for its statements and COMMIT — the guess a careful engineer
// would write down.
func handMargin(hold time.Duration) time.Duration { return hold + 15*time.Millisecond }

// handGrace is how long past the caller's deadline FormHandLockTimeout
// lets a statement run before the driver cuts it (and closes the
// connection): only a server that does not answer at all gets there.
const handGrace = time.Second

// DeadlineConfig describes one run of the deadline scenario: Workers
// callers on one key, each call under its own context.WithTimeout(Deadline),
// a critical section of Hold, on a warm pool of Pool connections.
type DeadlineConfig struct {
	DSN  string
	Form Form
	// Workers is the number of concurrent callers (default 32).
	Workers int
	// Pool is the pool's size (default 32), opened before the clock
	// starts. Advisory forms get one connection more: each waiter and the
	// holder pin one, and the holder's critical section needs another (the
	// advisory package documentation asks for the pool to be sized so).
	// Workers > Pool for an advisory form starves the holder of a
	// connection.
	Pool int
	// Hold is the critical section's duration, a pg_sleep between the read
	// and the write of the counter (default 5 ms).
	Hold time.Duration
	// Deadline is each call's context timeout (default 100 ms).
	Deadline time.Duration
	// Calls is the number of calls per worker. When zero, workers call
	// until Duration has passed (default 1 s).
	Calls    int
	Duration time.Duration
}

func (c *DeadlineConfig) defaults() {
	if c.Workers <= 0 {
		c.Workers = 32
	}
	if c.Pool <= 0 {
		c.Pool = 32
	}
	if c.Hold <= 0 {
		c.Hold = 5 * time.Millisecond
	}
	if c.Deadline <= 0 {
		c.Deadline = 100 * time.Millisecond
	}
	if c.Calls <= 0 && c.Duration <= 0 {
		c.Duration = time.Second
	}
}

// DeadlineResult is what one run measured. Every call of the measured
// phase ends in exactly one of Successes, Timeouts, LockTimeouts,
// Deadlines and Others.
type DeadlineResult struct {
	Config  DeadlineConfig // with the defaults filled in
	Calls   int
	Elapsed time.Duration // of the measured phase

	Successes int
	// Timeouts are sqlock's typed timeouts: errors.Is advisory.ErrTimeout
	// or txlock.ErrTimeout.
	Timeouts int
	// LockTimeouts are other errors carrying SQLSTATE 55P03
	// (lock_not_available): the hand-written lock_timeout's.
	LockTimeouts int
	// Deadlines are other errors matching context.DeadlineExceeded: the
	// context ended the call.
	Deadlines int
	// Others are every other error; OtherSamples holds a few of them.
	Others       int
	OtherSamples []string
	// Unknown counts failed calls whose UPDATE had been sent (the deadline
	// came during the UPDATE, or during or after COMMIT): they may have
	// incremented the counter.
	Unknown int
	// Increments is how much the counter row grew in the measured phase.
	// Exclusion held and nothing was lost iff Successes ≤ Increments ≤
	// Successes+Unknown; RunDeadline returns an error otherwise.
	Increments int64

	// Counted by hooks on the pgconn configuration of every handle of the
	// run, during the measured phase: NewConns connections established
	// (AfterConnect), Attempts connection attempts (AfterNetConnect; an
	// attempt that did not become a connection is one whose context ended
	// while it was being set up — the server may have started a backend
	// for it all the same), and Dials every network dial: the attempts and
	// the cancel requests pgx sends when it closes a connection in the
	// middle of a statement (Cancels = Dials - Attempts).
	NewConns, Attempts, Dials, Cancels int
	// TotalConns and TotalAttempts count the whole run, warm-up and set-up
	// included.
	TotalConns, TotalAttempts int
	// Sessions and SessionsAbandoned are the growth of pg_stat_database's
	// sessions and sessions_abandoned (PostgreSQL 14+) for the run's
	// database from before the run until all of its backends had exited
	// (-1 when they could not be read). SessionsExact reports that the
	// database had no other backends when the run started, so that
	// TotalConns ≤ Sessions ≤ TotalAttempts.
	Sessions, SessionsAbandoned int
	SessionsExact               bool

	// MaxBackends and MaxLockWaiters are the most backends connected to
	// the run's database, and the most of them waiting for a lock, seen by
	// sampling pg_stat_activity every 20 ms during the measured phase (-1
	// when not sampled). More backends than the pool holds connections
	// are backends whose client has gone: abandoned waits still queued, or
	// connections being set up for a context that has already ended.
	MaxBackends, MaxLockWaiters int

	// HandMargin is the margin FormHandLockTimeout keeps back from the
	// deadline (zero for the other forms).
	HandMargin time.Duration
}

// Timeouted is the number of calls that ended in any kind of timeout.
func (r DeadlineResult) Timeouted() int { return r.Timeouts + r.LockTimeouts + r.Deadlines }

// SuccessesPerSecond and NewConnsPerSecond are the rates of the measured
// phase.
func (r DeadlineResult) SuccessesPerSecond() float64 {
	return float64(r.Successes) / r.Elapsed.Seconds()
}

// NewConnsPerSecond is NewConns per second of the measured phase.
func (r DeadlineResult) NewConnsPerSecond() float64 {
	return float64(r.NewConns) / r.Elapsed.Seconds()
}

// FormatDeadlines formats results as a table: one line per run, with the
// outcomes, the unknown outcomes, the connections of the measured phase
// (completed and dialled) and the pg_stat_database cross-check of the
// whole run.
func FormatDeadlines(rs []DeadlineResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %8s %5s %5s %8s %5s %8s %5s %7s %8s %8s %7s %8s %9s %8s %8s\n",
		"form", "deadline", "calls", "ok", "ErrTimeo", "55P03", "ctx-dead", "other", "unknown",
		"newconns", "attempts", "cancels", "sessions", "abandoned", "backends", "lockwait")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-36s %8v %5d %5d %8d %5d %8d %5d %7d %8d %8d %7d %8d %9d %8d %8d\n",
			r.Config.Form, r.Config.Deadline, r.Calls, r.Successes, r.Timeouts, r.LockTimeouts, r.Deadlines,
			r.Others, r.Unknown, r.NewConns, r.Attempts, r.Cancels, r.Sessions, r.SessionsAbandoned,
			r.MaxBackends, r.MaxLockWaiters)
	}
	return b.String()
}

// deadlineKey is the one key every caller contends on.
var deadlineKey = advisory.KeyOf("contention:deadline")

// rig is one run's handles and counters.
type rig struct {
	cfg      DeadlineConfig
	pool     *pgxpool.Pool // the handle under test for pgx forms
	db       *sql.DB       // the handle under test for database/sql forms
	size     int           // connections of the handle under test
	locker   *advisory.Locker
	conns    atomic.Int64    // connections established (AfterConnect)
	attempts atomic.Int64    // connection attempts (AfterNetConnect)
	dials    atomic.Int64    // attempts and cancel requests (DialFunc)
	connCfg  *pgx.ConnConfig // counting configuration for every handle
}

// RunDeadline runs the deadline scenario once: it opens the form's handle
// (counting every connection it makes), creates the counter table, fills
// the pool and runs one call per worker with a generous deadline, then
// measures cfg.Workers callers under cfg.Deadline each, and checks the
// counter against the outcomes. The DSN's database should be used by
// nothing else meanwhile: the table "hot_deadline" is dropped and created,
// and the pg_stat_database cross-check counts every session on it.
func RunDeadline(ctx context.Context, cfg DeadlineConfig) (DeadlineResult, error) {
	cfg.defaults()
	res := DeadlineResult{Config: cfg, Sessions: -1, SessionsAbandoned: -1}
	r := &rig{cfg: cfg}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return res, err
	}
	r.connCfg = pc.ConnConfig
	r.count(r.connCfg)

	stats, err := openStats(ctx, cfg.DSN)
	if err != nil {
		stats = nil // no cross-check; Sessions stays -1
	}
	if stats != nil {
		defer stats.close()
		if err := stats.before(ctx); err != nil {
			return res, err
		}
	}

	setup, err := pgx.ConnectConfig(ctx, r.connCfg)
	if err != nil {
		return res, err
	}
	defer setup.Close(context.Background())
	if _, err := setup.Exec(ctx, `DROP TABLE IF EXISTS hot_deadline;
CREATE TABLE hot_deadline (id int PRIMARY KEY, n bigint NOT NULL);
INSERT INTO hot_deadline VALUES (1, 0);`); err != nil {
		return res, err
	}
	closeHandle, err := r.open(ctx, pc)
	if err != nil {
		return res, err
	}
	defer closeHandle()
	call, err := r.caller()
	if err != nil {
		return res, err
	}

	// Warm-up: every connection open, every worker's statements prepared
	// (the pool is filled again after the warm-up calls: the advisory
	// probe closes connections).
	if err := r.fill(ctx); err != nil {
		return res, fmt.Errorf("%s: fill: %w", cfg.Form, err)
	}
	if err := r.warm(ctx, call); err != nil {
		return res, fmt.Errorf("%s: warm-up: %w", cfg.Form, err)
	}
	if err := r.fill(ctx); err != nil {
		return res, fmt.Errorf("%s: fill: %w", cfg.Form, err)
	}
	n0, err := readCounter(ctx, setup)
	if err != nil {
		return res, err
	}
	conns0, attempts0, dials0 := r.conns.Load(), r.attempts.Load(), r.dials.Load()

	res.MaxBackends, res.MaxLockWaiters = -1, -1
	var stopSampling func()
	if stats != nil {
		stopSampling = stats.sample(ctx, &res)
	}
	tally, elapsed := r.measure(ctx, call, cfg.Calls)
	if stopSampling != nil {
		stopSampling()
	}

	res.NewConns, res.Attempts = int(r.conns.Load()-conns0), int(r.attempts.Load()-attempts0)
	res.Dials = int(r.dials.Load() - dials0)
	res.Cancels = res.Dials - res.Attempts
	res.Elapsed = elapsed
	tally.into(&res)
	if cfg.Form == FormHandLockTimeout {
		res.HandMargin = handMargin(cfg.Hold)
	}
	n1, err := readCounter(ctx, setup)
	if err != nil {
		return res, err
	}
	res.Increments = n1 - n0
	if sum := res.Successes + res.Timeouted() + res.Others; sum != res.Calls {
		return res, fmt.Errorf("%s: %d outcomes for %d calls", cfg.Form, sum, res.Calls)
	}
	if res.Increments < int64(res.Successes) || res.Increments > int64(res.Successes+res.Unknown) {
		return res, fmt.Errorf("%s: counter grew by %d for %d successes and %d calls of unknown outcome: lost or phantom updates",
			cfg.Form, res.Increments, res.Successes, res.Unknown)
	}

	closeHandle()
	setup.Close(ctx)
	res.TotalConns, res.TotalAttempts = int(r.conns.Load()), int(r.attempts.Load())
	if stats != nil {
		if err := stats.after(ctx, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// count makes every connection from c increment r's counters.
func (r *rig) count(c *pgx.ConnConfig) {
	dial := c.DialFunc
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.dials.Add(1)
		return dial(ctx, network, addr)
	}
	netConnect := c.AfterNetConnect
	c.AfterNetConnect = func(ctx context.Context, pc *pgconn.Config, conn net.Conn) (net.Conn, error) {
		r.attempts.Add(1)
		if netConnect != nil {
			return netConnect(ctx, pc, conn)
		}
		return conn, nil
	}
	after := c.AfterConnect
	c.AfterConnect = func(ctx context.Context, pc *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, pc); err != nil {
				return err
			}
		}
		r.conns.Add(1)
		return nil
	}
}

// open opens the handle under test and returns its close function (safe
// to call twice).
func (r *rig) open(ctx context.Context, pc *pgxpool.Config) (func(), error) {
	r.size = r.cfg.Pool
	if r.cfg.Form.advisoryForm() {
		r.size++
	}
	var once sync.Once
	if r.cfg.Form.sqlForm() {
		if r.cfg.Form == FormTxLockOpenDB {
			r.db = txlock.OpenDB(*r.connCfg)
		} else {
			r.db = stdlib.OpenDB(*r.connCfg)
		}
		r.db.SetMaxOpenConns(r.size)
		r.db.SetMaxIdleConns(r.size)
		return func() { once.Do(func() { r.db.Close() }) }, nil
	}
	pc.MaxConns = int32(r.size)
	var err error
	if r.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	return func() { once.Do(r.pool.Close) }, nil
}

// fill opens every connection of the handle under test: it takes them all
// at once and gives them back.
func (r *rig) fill(ctx context.Context) error {
	if r.db != nil {
		conns := make([]*sql.Conn, 0, r.size)
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range r.size {
			c, err := r.db.Conn(ctx)
			if err != nil {
				return err
			}
			if err := c.PingContext(ctx); err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	}
	conns := make([]*pgxpool.Conn, 0, r.size)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range r.size {
		c, err := r.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// warm runs one call per worker, all at once, with a generous deadline.
func (r *rig) warm(ctx context.Context, call callFunc) error {
	errs := make([]error, r.cfg.Workers)
	var wg sync.WaitGroup
	for i := range r.cfg.Workers {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for {
				var updated bool
				errs[i] = call(cctx, &updated)
				// A form whose lock_timeout is its own (not the
				// context's) times out among 32 warm-up calls too.
				if !errors.Is(errs[i], txlock.ErrTimeout) {
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tally counts outcomes.
type tally struct {
	mu                                                    sync.Mutex
	calls, ok, timeouts, lockTimeouts, deadlines, unknown int
	others                                                int
	samples                                               []string
}

func (t *tally) add(err error, updated bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if err == nil {
		t.ok++
		return
	}
	if updated {
		t.unknown++
	}
	switch {
	case errors.Is(err, advisory.ErrTimeout) || errors.Is(err, txlock.ErrTimeout):
		t.timeouts++
	case pgerror.Code(err) == pgerror.LockNotAvailable:
		t.lockTimeouts++
	case errors.Is(err, context.DeadlineExceeded):
		t.deadlines++
	default:
		t.others++
		if len(t.samples) < 5 {
			t.samples = append(t.samples, err.Error())
		}
	}
}

func (t *tally) into(r *DeadlineResult) {
	r.Calls, r.Successes, r.Timeouts, r.LockTimeouts = t.calls, t.ok, t.timeouts, t.lockTimeouts
	r.Deadlines, r.Others, r.OtherSamples, r.Unknown = t.deadlines, t.others, t.samples, t.unknown
}

// measure runs calls calls per worker, or, when calls is zero, calls for
// the configured duration.
func (r *rig) measure(ctx context.Context, call callFunc, calls int) (*tally, time.Duration) {
	t := &tally{}
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(r.cfg.Duration)
	for range r.cfg.Workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				if calls > 0 && i == calls || calls <= 0 && !time.Now().Before(end) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, r.cfg.Deadline)
				var updated bool
				err := call(cctx, &updated)
				cancel()
				t.add(err, updated)
			}
		})
	}
	wg.Wait()
	return t, time.Since(start)
}

// callFunc is one call of a form; it sets *updated when it sends the
// critical section's UPDATE.
type callFunc func(ctx context.Context, updated *bool) error

// caller returns the form's call.
func (r *rig) caller() (callFunc, error) {
	hold := r.cfg.Hold.Seconds()
	key, _ := deadlineKey.Int64()
	switch r.cfg.Form {
	case FormTxLockSQL, FormTxLockOpenDB:
		return func(ctx context.Context, updated *bool) error {
			return txlock.Do(ctx, r.db, deadlineKey, func(ctx context.Context, tx *sql.Tx) error {
				return sqlWork(ctx, tx, hold, updated)
			})
		}, nil
	case FormTxLockPgx:
		return func(ctx context.Context, updated *bool) error {
			return txlock.DoPgx(ctx, r.pool, deadlineKey, func(ctx context.Context, tx pgx.Tx) error {
				return pgxWork(ctx, tx, "", hold, updated)
			})
		}, nil
	case FormTxLockPgxTimeout:
		opt := txlock.WithTimeout(r.cfg.Deadline - handMargin(r.cfg.Hold))
		return func(ctx context.Context, updated *bool) error {
			return txlock.DoPgx(ctx, r.pool, deadlineKey, func(ctx context.Context, tx pgx.Tx) error {
				return pgxWork(ctx, tx, "", hold, updated)
			}, opt)
		}, nil
	case FormAdvisoryPool:
		r.locker = advisory.NewPool(r.pool)
		return func(ctx context.Context, updated *bool) error {
			return r.locker.Do(ctx, deadlineKey, func(ctx context.Context) error {
				return pgxWork(ctx, r.pool, "", hold, updated)
			})
		}, nil
	case FormAdvisorySQL:
		r.locker = advisory.New(r.db)
		return func(ctx context.Context, updated *bool) error {
			return r.locker.Do(ctx, deadlineKey, func(ctx context.Context) error {
				return sqlWork(ctx, r.db, hold, updated)
			})
		}, nil
	case FormHandForUpdate:
		return func(ctx context.Context, updated *bool) error {
			return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
				return pgxWork(ctx, tx, " FOR UPDATE", hold, updated)
			})
		}, nil
	case FormHandLock:
		return func(ctx context.Context, updated *bool) error {
			return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					return err
				}
				return pgxWork(ctx, tx, "", hold, updated)
			})
		}, nil
	case FormHandLockTimeout:
		return func(ctx context.Context, updated *bool) error {
			d, _ := ctx.Deadline()
			left := time.Until(d) - handMargin(r.cfg.Hold)
			if left < time.Millisecond { // lock_timeout 0 would mean no limit
				return fmt.Errorf("no time left to wait for the lock: %w", context.DeadlineExceeded)
			}
			// The transaction runs detached from the caller's cancellation,
			// bounded by a grace period past the deadline: the server's
			// lock_timeout ends the wait, and a deadline that passes during
			// the critical section (a slow machine) rolls back instead of
			// making pgx close the connection.
			tctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d.Add(handGrace))
			defer cancel()
			return pgx.BeginFunc(tctx, r.pool, func(tx pgx.Tx) error {
				ms := strconv.FormatInt(int64(left/time.Millisecond), 10) + "ms"
				if _, err := tx.Exec(tctx, "SELECT set_config('lock_timeout', $1, true)", ms); err != nil {
					return err
				}
				if _, err := tx.Exec(tctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
					return err
				}
				if err := pgxWork(tctx, tx, "", hold, updated); err != nil {
					return err
				}
				return ctx.Err() // never COMMIT for a caller who has gone
			})
		}, nil
	}
	return nil, fmt.Errorf("contention: unknown form %q", r.cfg.Form)
}

// pgxQuerier is a pgx.Tx or a *pgxpool.Pool.
type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgxWork is the critical section: read the counter, hold, write it back
// plus one.
func pgxWork(ctx context.Context, q pgxQuerier, suffix string, hold float64, updated *bool) error {
	var n int64
	if err := q.QueryRow(ctx, "SELECT n FROM hot_deadline WHERE id = 1"+suffix).Scan(&n); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, "SELECT pg_sleep($1)", hold); err != nil {
		return err
	}
	*updated = true // from here on the increment may have been applied
	if _, err := q.Exec(ctx, "UPDATE hot_deadline SET n = $1 WHERE id = 1", n+1); err != nil {
		return err
	}
	return nil
}

// sqlQuerier is a *sql.Tx or a *sql.DB.
type sqlQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func sqlWork(ctx context.Context, q sqlQuerier, hold float64, updated *bool) error {
	var n int64
	if err := q.QueryRowContext(ctx, "SELECT n FROM hot_deadline WHERE id = 1").Scan(&n); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, "SELECT pg_sleep($1)", hold); err != nil {
		return err
	}
	*updated = true // from here on the increment may have been applied
	if _, err := q.ExecContext(ctx, "UPDATE hot_deadline SET n = $1 WHERE id = 1", n+1); err != nil {
		return err
	}
	return nil
}

func readCounter(ctx context.Context, c *pgx.Conn) (int64, error) {
	var n int64
	err := c.QueryRow(ctx, "SELECT n FROM hot_deadline WHERE id = 1").Scan(&n)
	return n, err
}

// statsConn reads pg_stat_database for the run's database from the
// cluster's maintenance database, so that its own session is not counted.
type statsConn struct {
	conn             *pgx.Conn
	db               string
	exact            bool
	sessions0, aban0 int64
}

func openStats(ctx context.Context, dsn string) (*statsConn, error) {
	c, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	db := c.Database
	c.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		return nil, err
	}
	return &statsConn{conn: conn, db: db}, nil
}

func (s *statsConn) close() { s.conn.Close(context.Background()) }

// backends is the number of backends connected to the run's database.
func (s *statsConn) backends(ctx context.Context) (int, error) {
	var n int
	err := s.conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", s.db).Scan(&n)
	return n, err
}

// sample records the most backends (and lock waiters) on the run's
// database in res until the returned function is called. It uses a
// connection of its own, to the maintenance database.
func (s *statsConn) sample(ctx context.Context, res *DeadlineResult) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	cfg := s.conn.Config().Copy()
	go func() {
		defer close(done)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var n, waiting int
			err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock')
FROM pg_stat_activity WHERE datname = $1`, s.db).Scan(&n, &waiting)
			if err != nil {
				return
			}
			res.MaxBackends, res.MaxLockWaiters = max(res.MaxBackends, n), max(res.MaxLockWaiters, waiting)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (s *statsConn) read(ctx context.Context) (sessions, abandoned int64, err error) {
	err = s.conn.QueryRow(ctx, `SELECT coalesce(sessions, 0), coalesce(sessions_abandoned, 0)
FROM pg_stat_database WHERE datname = $1`, s.db).Scan(&sessions, &abandoned)
	return
}

func (s *statsConn) before(ctx context.Context) error {
	n, err := s.backends(ctx)
	if err != nil {
		return err
	}
	s.exact = n == 0
	s.sessions0, s.aban0, err = s.read(ctx)
	return err
}

// after waits until every backend of the run has exited — a backend
// reports its session to the statistics when it exits, and an abandoned
// one exits only once its lock wait ends — then reads the growth.
func (s *statsConn) after(ctx context.Context, res *DeadlineResult) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if s.exact {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := s.backends(ctx)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d backends of the run still connected: %w", n, ctx.Err())
			case <-tick.C:
			}
		}
	}
	sessions, abandoned, err := s.read(ctx)
	if err != nil {
		return err
	}
	res.Sessions, res.SessionsAbandoned = int(sessions-s.sessions0), int(abandoned-s.aban0)
	res.SessionsExact = s.exact
	return nil
}
