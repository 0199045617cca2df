package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/txlock"
)

// The root module's faults, attached to its load rows by mechanism
// (pgFaults) and, for a form no load row has, on rows of their own
// (faultRows). Each injects its fault with the levers the packages' own
// tests use: pgtest's proxy (stall, cut), its private clusters (killed and
// started again), its replica sets (failover to a synchronous or an
// asynchronous standby) and PgBouncer, and for a paused holder a real OS
// process — this test binary run again as a child holding a lease —
// stopped with SIGSTOP.
//
// A holder's pause, cut or partition is placed between its read and its
// write by construction (matrix.PauseBeforeWrite), or before its guarded
// transaction, so that each verdict follows from what the mechanism does,
// not from the scheduler. The stale write itself is
// not one of the run's operations: refused by a fence, it is what the
// mechanism promises (and is noted); landed, it shows as the workload's
// anomaly.
func init() {
	for _, m := range []string{"versioned+retry", "gormplugin+retry", "CAS", "DoOptimistic", "by hand: UPDATE … WHERE version",
		"by hand: pg_advisory_xact_lock", "idem"} {
		pgFaults[m] = append(pgFaults[m], storeKilled())
	}
	pgFaults["versioned+retry"] = append(pgFaults["versioned+retry"], behindPgBouncer(matrix.Safe))
	pgFaults["txlock"] = append(pgFaults["txlock"], storeKilled(), txlockCut(), behindPgBouncer(matrix.Safe))
	pgFaults["advisory"] = append(pgFaults["advisory"], advisoryCut(), behindPgBouncer(matrix.Unavailable))
	pgFaults["lease"] = append(pgFaults["lease"], pausedPastTTL(true), leasePartitioned(),
		leaseFailover(true), leaseFailover(false))
	pgFaults["lease"] = append(pgFaults["lease"], behindPgBouncer(matrix.Safe))
	pgFaults["lease+Guard"] = append(pgFaults["lease+Guard"], pausedFault(matrix.HolderSpec{Guarded: true}), behindPgBouncer(matrix.Safe))
	faultRows = append(faultRows, matrix.Row{
		Mechanism: "lease (unfenced)", Group: "lock", Open: leaseRow(unfencedWrite),
		Faults: []matrix.Fault{pausedPastTTL(false)},
	})
}

// sizes are a fault's contenders and operations per contender in mode m:
// a few in quick (make test), enough to measure in full; rounds is how
// many times a fault that is made once per holder is made.
func sizes(m matrix.Mode) (contenders, ops, rounds int) {
	if m == matrix.Full {
		return 8, 50, 3
	}
	return 2, 3, 1
}

// holderTTL is a paused or partitioned holder's lease TTL, as lease's
// own pause test picks it — long beside the machine's round trip, which
// a Manager refuses a TTL shorter than 8 of — but at most 3 s, so that
// the row's next holder, whose wait is bounded by lease.DefaultTimeout
// (5 s), outwaits it.
func holderTTL(db *pgtest.DB) time.Duration {
	return min(max(500*time.Millisecond, 50*db.Latency()), 3*time.Second)
}

// flushIdle closes db's idle connections, which a fault may have broken
// (a killed server, a failover), keeping room for n afterwards: the next
// statement opens a connection to the server that now takes writes.
func flushIdle(db *sql.DB, n int) {
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(n)
}

// idleConns is what the harness keeps idle on a cell of c contenders.
func idleConns(c *matrix.Cell) int { return 2*c.Contenders + 4 }

// via is c reached through dsn instead (a proxy in front of the same
// database): the same State, contenders and round-trip counter.
func via(c *matrix.Cell, dsn string) *matrix.Cell {
	v := *c
	v.DSN = dsn
	return &v
}

// staleWrite records how a stale holder's write, sent after the next
// holder's operation, ended: refused by the fence or the guard (noted),
// landed (noted; the workload's check counts the anomaly it made), or
// neither, which means the fault was not made.
func staleWrite(f *matrix.FaultRun, who string, r matrix.Result, err error) error {
	switch {
	case errors.Is(err, matrix.ErrFenced):
		f.Note("%s: its write was refused by the fence (ErrFenced)", who)
	case errors.Is(err, lease.ErrLost):
		f.Note("%s: its guarded transaction was refused (ErrLost)", who)
	case err == nil && r == matrix.Done:
		f.Note("%s: its write landed", who)
	default:
		return fmt.Errorf("%s: the stale write neither landed nor was fenced: %v, %v", who, r, err)
	}
	return nil
}

// --- the paused holder: a child process (matrix.PausedRound) ---

// openLeaseHolder is the paused holder's lock, in its process: a lease on
// the cell's database.
func openLeaseHolder(_ context.Context, spec matrix.HolderSpec) (sqlock.Acquirer, func(), error) {
	db, err := matrix.OpenSQL(spec.DSN, &matrix.RoundTrips{})
	if err != nil {
		return nil, nil, err
	}
	return lease.New(db, lease.WithTimeout(time.Minute)).Acquirer(spec.TTL), func() { db.Close() }, nil
}

// pausedPastTTL: the holder, a real OS process, is stopped with SIGSTOP
// between its read and its write until the next holder has taken the
// lease (which the server gives only once the paused one's TTL has run
// out) and written; continued, it writes what it read. Fenced by its
// token, the write is refused (ErrFenced): safe. Unfenced it lands on top
// of the next holder's: a double charge, by construction. (lease+Guard's
// form, pausedFault with Guard: paused before its guarded transaction, the
// holder's BEGIN is refused with ErrLost.)
func pausedPastTTL(fenced bool) matrix.Fault {
	return pausedFault(matrix.HolderSpec{Fenced: fenced})
}

// pausedFault is pausedPastTTL for the holder spec describes (fenced,
// unfenced or guarded).
func pausedFault(spec matrix.HolderSpec) matrix.Fault {
	name, expect := "holder paused past TTL (fenced)", matrix.Safe
	if !spec.Fenced && !spec.Guarded {
		name, expect = "holder paused past TTL (unfenced)", matrix.Unsafe
	}
	return matrix.Fault{Name: name, Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c) // migrates the leases' table
		if err != nil {
			return err
		}
		// Guarded, the pause is before the transaction: inside it the
		// lease cannot be taken over, and a pause there makes the next
		// holder wait, no more.
		spec.TTL = holderTTL(db)
		for i := range rounds {
			next := func(context.Context) (matrix.Actor, error) { return actors[0], nil }
			if err := f.PausedRound(ctx, c, c.State.Key(i), spec, next); err != nil {
				return err
			}
		}
		return nil
	}}
}

// leaseFailover: the same paused holder on a primary with a streaming
// standby; during its pause the primary is stopped hard (SIGQUIT) and the
// standby promoted, and the next holder takes the lease on the promoted
// standby. Synchronous, the standby had the paused holder's grant and its
// token before Acquire returned, so the next holder waits out its TTL and
// gets a greater token, and the stale write is fenced: safe.
// Asynchronous, the grant may not have reached the standby: nothing
// promises the next holder a greater token, so the verdict is measured,
// not asserted.
func leaseFailover(synchronous bool) matrix.Fault {
	name, expect := "failover sync", matrix.Safe
	if !synchronous {
		name, expect = "failover async", ""
	}
	return matrix.Fault{Name: name, Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		r := pgtest.NewReplicaSet(f.T, pgtest.ReplicaOptions{Synchronous: synchronous})
		db := r.NewDB(f.T)
		c, err := f.NewCell(ctx, db.DSN, contenders, matrix.HotKey, ops+1)
		if err != nil {
			return err
		}
		if err := lease.Migrate(ctx, c.DB); err != nil {
			return err
		}
		if err := r.WaitReplay(ctx); err != nil { // the state and the table are on the standby
			return err
		}
		var lag int64
		failover := func() error {
			var err error
			if lag, err = r.Lag(ctx); err != nil {
				return err
			}
			if err := r.Failover(ctx); err != nil {
				return err
			}
			flushIdle(c.DB, idleConns(c))
			return nil
		}
		var actors []matrix.Actor
		during := func(ctx context.Context) (matrix.Actor, error) {
			if err := failover(); err != nil {
				return nil, err
			}
			var err error
			actors, err = f.Actors(ctx, c) // opened on the promoted standby
			if err != nil {
				return nil, err
			}
			return actors[0], nil
		}
		ttl := holderTTL(db)
		if err := f.PausedRound(ctx, c, c.State.Key(ops), matrix.HolderSpec{TTL: ttl, Fenced: true}, during); err != nil {
			return err
		}
		f.Load(ctx, c, actors, ops) // the load goes on, on the promoted standby
		f.Note("the paused holder (lease TTL %v) read on the primary; the primary was stopped hard (SIGQUIT) with the standby %d bytes behind and the standby promoted; the next holder took the lease there", ttl, lag)
		if !synchronous {
			f.Note("not asserted: asynchronous replication loses with the primary what the standby had not received; a grant younger than the lag is lost, and then the next holder's token need not be greater; here the primary died after the holder's pause began, by when the standby usually has its grant (lag above); lease's TestFailoverWithAsynchronousReplicationMeasuresTheWindow measures the window under load")
		}
		return nil
	}}
}

// leasePartitioned: the holder reaches its store through pgtest's proxy,
// which stalls between the holder's read and its write. Its renewals do
// not arrive, the lease expires on the server, and the next holder (on a
// direct connection) takes it and writes. The partition heals: the
// holder's write, sent as if nothing happened, arrives after the next
// holder's and is refused by the fence.
func leasePartitioned() matrix.Fault {
	return matrix.Fault{Name: "partitioned by proxy", Expect: matrix.Safe, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c) // the next holder, direct
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		hdb, err := openTx(ctx, via(c, p.DSN))
		if err != nil {
			return err
		}
		defer hdb.Close()
		m := lease.New(hdb)
		ttl := holderTTL(db)
		lost := 0
		for i := range rounds {
			key := c.State.Key(i)
			l, err := m.Acquire(ctx, matrix.LockName(c, key), ttl)
			if err != nil {
				return err
			}
			h, err := matrix.Hold(ctx, func(ctx context.Context, pause func(context.Context)) (matrix.Result, error) {
				return c.State.Apply(ctx, matrix.PauseBeforeWrite(hdb, pause), key, l.Token())
			})
			if err != nil {
				return err
			}
			p.Stall()
			f.Do(ctx, actors[0], key)
			select {
			case <-l.Lost():
				lost++
			default:
			}
			p.Resume()
			r, err := h.Wait(ctx)
			l.Release(ctx) // not held any more: its error says so
			if err := staleWrite(f, fmt.Sprintf("the partitioned holder (token %d)", l.Token()), r, err); err != nil {
				return err
			}
		}
		f.Note("the proxy stalled between the holder's read and its write until the next holder (direct) had written (lease TTL %v); the holder's Lost had fired in %d of %d rounds, and it wrote regardless", ttl, lost, rounds)
		return nil
	}}
}

// --- the store killed ---

// storeKilled: the load runs on a private cluster, which is stopped hard
// (SIGQUIT, PostgreSQL's immediate shutdown: a crash) mid-load; an
// operation of each contender runs while it is down, then it is started
// again (WAL replayed) and the load goes on. The rows it is attached to
// keep all they decide in the transaction of the write (a version, a
// transaction-scoped lock, idem's claim), which the crash commits or rolls
// back whole, so nothing is lost or doubled: the operations fail while
// the store is down (unavailable), and no anomaly. (A session lock or a
// lease outlives its holder's failed operation, so theirs is another
// fault.)
func storeKilled() matrix.Fault {
	return matrix.Fault{Name: "store killed", Expect: matrix.Unavailable, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		cl, err := killable()
		if err != nil {
			return err
		}
		c, err := f.NewCell(ctx, cl.NewDB(f.T).DSN, contenders, matrix.HotKey, 2*ops)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		var ok atomic.Int64
		counted := make([]matrix.Actor, len(actors))
		for i, a := range actors {
			counted[i] = matrix.ActorFunc(func(ctx context.Context, key string) (matrix.Result, error) {
				r, err := a.Op(ctx, key)
				if err == nil {
					ok.Add(1)
				}
				return r, err
			})
		}
		// The kill lands halfway through the load; the load stops there
		// (its operations in flight fail with the store), so that what
		// runs while the store is down is one operation per contender.
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		loaded := make(chan struct{})
		go func() {
			defer close(loaded)
			f.Load(lctx, c, counted, ops)
		}()
		half := int64(contenders * ops / 2)
		if err := waitFor(ctx, loaded, func() bool { return ok.Load() >= half }); err != nil {
			return err
		}
		if err := cl.Kill(); err != nil {
			return err
		}
		stop()
		<-loaded
		before := ok.Load()
		for i, a := range actors { // refused by a store that is down
			f.Do(ctx, a, matrix.KeyOf(c, i, ops))
		}
		if err := cl.Start(ctx); err != nil {
			return err
		}
		flushIdle(c.DB, idleConns(c))
		f.Load(ctx, c, actors, ops)
		f.Note("killed (SIGQUIT) halfway through the load (%d of %d operations had succeeded), an operation of each of the %d contenders while it was down, started again, the load run again",
			before, contenders*ops, contenders)
		return nil
	}}
}

// killable is the private cluster the store-killed faults kill, started
// on first use and shared by them (one each would cost an initdb each),
// each fault on a database of its own. Its watchdog stops it and removes
// its directory when the test binary exits.
var killable = sync.OnceValues(func() (*pgtest.Cluster, error) {
	return pgtest.StartCluster(context.Background(), pgtest.Options{})
})

// waitFor waits until cond holds, done is closed or ctx ends (an error).
func waitFor(ctx context.Context, done <-chan struct{}, cond func() bool) error {
	for !cond() {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for the load: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// --- the holder's connection cut ---

// cutRound is one holder on key, reaching the lock through proxy (its
// operation op), stopped between its read and its write while the proxy
// cuts every connection through it; the next holder (the row's actor,
// direct) does the operation on key; then the holder writes. The holder's
// operation is recorded as one of the run's.
func cutRound(ctx context.Context, f *matrix.FaultRun, p *pgtest.Proxy, next matrix.Actor, key string,
	op func(ctx context.Context, pause func(context.Context)) (matrix.Result, error)) error {
	h, err := matrix.Hold(ctx, op)
	if err != nil {
		return err
	}
	held := matrix.ActorFunc(func(ctx context.Context, _ string) (matrix.Result, error) {
		return h.Wait(ctx)
	})
	p.Cut()
	f.Do(ctx, next, key)
	f.Do(ctx, held, key)
	return nil
}

// txlockCut: the holder's transaction — the lock and the work on one
// connection — is cut by the proxy between its read and its write. The
// server ends the session, which rolls the transaction back and releases
// the lock; the next holder gets it; the holder's write fails on the cut
// connection and none of its work commits. Unavailable (its operation
// fails), never unsafe: structurally, since the lock and the writes share
// the transaction.
func txlockCut() matrix.Fault {
	return matrix.Fault{Name: "holder's connection cut", Expect: matrix.Unavailable, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		hdb, err := openTx(ctx, via(c, p.DSN))
		if err != nil {
			return err
		}
		defer hdb.Close()
		for i := range rounds {
			key := c.State.Key(i)
			err := cutRound(ctx, f, p, actors[0], key, func(ctx context.Context, pause func(context.Context)) (r matrix.Result, err error) {
				err = txlock.Do(ctx, hdb, lockKey(c, key), func(ctx context.Context, tx *sql.Tx) (err error) {
					r, err = c.State.Apply(ctx, matrix.PauseBeforeWrite(tx, pause), key, 0)
					return err
				})
				return r, err
			})
			if err != nil {
				return err
			}
		}
		f.Note("the proxy cut the holder's connection between its read and its write, %d round(s); the next holder was direct", rounds)
		return nil
	}}
}

// advisoryCut: the holder's lock session, through the proxy, is cut
// between its read and its write, which go (as the row's do) through the
// pool, here direct. The lock ends with the session and the next holder
// gets it at once. The holder is told (Do's context ends, ErrLost) by its
// next keepalive, within 1¼ intervals; whether its write went first is a
// race with that timer, and an advisory lock has no token that would
// refuse it. So the verdict is measured, not asserted.
func advisoryCut() matrix.Fault {
	return matrix.Fault{Name: "holder's connection cut", Run: func(ctx context.Context, f *matrix.FaultRun) error {
		_, _, rounds := sizes(f.Mode)
		db := pgtest.New(f.T)
		c, err := f.NewCell(ctx, db.DSN, 1, matrix.HotKey, rounds)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		p := pgtest.StartProxy(f.T, db.DSN)
		ldb, err := matrix.OpenSQL(p.DSN, c.RoundTrips)
		if err != nil {
			return err
		}
		defer ldb.Close()
		l := advisory.New(ldb)
		for i := range rounds {
			key := c.State.Key(i)
			err := cutRound(ctx, f, p, actors[0], key, func(ctx context.Context, pause func(context.Context)) (r matrix.Result, err error) {
				err = l.Do(ctx, lockKey(c, key), func(ctx context.Context) (err error) {
					r, err = c.State.Apply(ctx, matrix.PauseBeforeWrite(c.DB, pause), key, 0)
					return err
				})
				return r, err
			})
			if err != nil {
				return err
			}
		}
		f.Note("not asserted: the proxy cut the lock's session between the holder's read and its write (%d round(s)); the lock ended with it and the next holder took it; the holder's write, on a pool connection, lands unless its keepalive (every %v) ended Do's context first: an advisory lock has no token to refuse it", rounds, advisory.DefaultKeepalive)
		return nil
	}}
}

// --- PgBouncer in transaction mode ---

// behindPgBouncer runs the row's load through PgBouncer in transaction
// mode (default_query_exec_mode=exec: PgBouncer 1.18 has no prepared
// statements). A transaction-scoped mechanism works there, and so does a
// lease, whose every statement stands alone (its waiters poll): safe. A
// session lock cannot, and advisory refuses every call with an error
// matching sqlock.ErrUnsupported (unavailable) rather than lock nothing.
func behindPgBouncer(expect matrix.Verdict) matrix.Fault {
	return matrix.Fault{Name: "PgBouncer (transaction mode)", Expect: expect, Run: func(ctx context.Context, f *matrix.FaultRun) error {
		contenders, ops, _ := sizes(f.Mode)
		db := pgtest.New(f.T)
		dsn := pgtest.StartPgBouncer(f.T, db, "transaction") + "&default_query_exec_mode=exec"
		c, err := f.NewCell(ctx, dsn, contenders, matrix.HotKey, ops)
		if err != nil {
			return err
		}
		actors, err := f.Actors(ctx, c)
		if err != nil {
			return err
		}
		f.Load(ctx, c, actors, ops)
		f.Note("%d contenders × %d operations through PgBouncer in transaction mode", contenders, ops)
		return nil
	}}
}
