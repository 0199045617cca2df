package advisory_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"pgregory.net/rapid"
)

// muxPool is the pool size of the multiplexing tests: the claim is many
// locks on at most 16 connections.
const muxPool = 16

// muxCase is a Locker on a pool of at most size connections, and how many
// of them are taken out of it.
type muxCase struct {
	name string
	open func(t testing.TB, db *pgtest.DB, size int, opts ...advisory.Option) (*advisory.Locker, func() int)
}

var muxBackends = []muxCase{
	{"pgxpool", func(t testing.TB, db *pgtest.DB, size int, opts ...advisory.Option) (*advisory.Locker, func() int) {
		p := pgxPoolWith(t, db, int32(size))
		return advisory.NewPool(p, opts...), func() int { return int(p.Stat().AcquiredConns()) }
	}},
	{"sql-pgx", func(t testing.TB, db *pgtest.DB, size int, opts ...advisory.Option) (*advisory.Locker, func() int) {
		s := db.OpenSQL()
		s.SetMaxOpenConns(size)
		s.SetMaxIdleConns(size)
		return advisory.New(s, opts...), func() int { return s.Stats().InUse }
	}},
}

func forEachMuxBackend(t *testing.T, f func(t *testing.T, mc muxCase)) {
	for _, mc := range muxBackends {
		t.Run(mc.name, func(t *testing.T) { f(t, mc) })
	}
}

// backendHolds reports whether backend pid holds any advisory lock of
// conn's database. A terminated backend tells its client before it lets
// its locks go, so a test that saw a loss waits on this.
func backendHolds(t tb, conn *pgx.Conn, pid uint32) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// heldByPID maps each granted advisory lock of db's database to the
// backend holding it: for locks held by one backend each (exclusive).
func heldByPID(t tb, conn *pgx.Conn) map[[3]int64]uint32 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT classid::int8, objid::int8, objsubid::int8, pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[[3]int64]uint32{}
	for rows.Next() {
		var k [3]int64
		var pid uint32
		if err := rows.Scan(&k[0], &k[1], &k[2], &pid); err != nil {
			t.Fatal(err)
		}
		m[k] = pid
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func tagKey(k advisory.Key) [3]int64 {
	c, o, s := k.Locktag()
	return [3]int64{int64(c), int64(o), int64(s)}
}

func isLost(lk *advisory.Lock) bool {
	select {
	case <-lk.Lost():
		return true
	default:
		return false
	}
}

// TestMultiplexedTenThousandLocksOnFewConnections: 10,000 session locks
// held at once by one process on a pool of 16 connections, all of them in
// pg_locks, at most 1 KiB of the client's heap per held lock (runtime
// memory statistics, after a collection, the pool's connections included),
// and all released by Release, every connection back in the pool.
func TestMultiplexedTenThousandLocksOnFewConnections(t *testing.T) {
	forEachMuxBackend(t, func(t *testing.T, mc muxCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		l, inUse := mc.open(t, db, muxPool, advisory.WithMultiplexing(12))
		if err := l.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		const n, workers = 10_000, 16
		locks := make([]*advisory.Lock, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Value
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					lk, err := l.TryLock(ctx, advisory.KeyInt(int64(i)))
					if err != nil {
						failed.Store(err)
						return
					}
					locks[i] = lk
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLock := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
		runtime.KeepAlive(locks)

		var held, pids, backends int
		if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT pid) FROM pg_locks
			WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held, &pids); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&backends); err != nil {
			t.Fatal(err)
		}
		if held != n || pids > muxPool || backends > muxPool {
			t.Fatalf("pg_locks shows %d granted advisory locks on %d backends (%d connections open); want %d on at most %d",
				held, pids, backends, n, muxPool)
		}
		if perLock > 1024 {
			t.Fatalf("%d bytes of heap per held lock, want at most 1 KiB", perLock)
		}
		t.Logf("%d locks held on %d backends (pool of %d), %d B of heap per lock, taken in %v",
			n, pids, muxPool, perLock, took.Round(time.Millisecond))

		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					if err := locks[i].Release(ctx); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			t.Fatal(err)
		}
		// Every unlock was confirmed: nothing is left, at once.
		nothingLeft(t, conn, inUse)
	})
}

// TestMultiplexedTryLockNeverGrantsAKeyTwiceInOneProcess: PostgreSQL grants
// a session lock again to the backend that holds it, so a try-once of a
// key held on a shared connection must not be sent there. Sequential and
// concurrent try-onces of a held key from the same Locker are refused;
// exactly one of 16 racing try-onces of a free key wins; shared-mode holds
// of one key land on distinct backends.
func TestMultiplexedTryLockNeverGrantsAKeyTwiceInOneProcess(t *testing.T) {
	forEachMuxBackend(t, func(t *testing.T, mc muxCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)

		// What the client must guard against: the server grants twice.
		var a, b bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(42), pg_try_advisory_lock(42)").Scan(&a, &b); err != nil || !a || !b {
			t.Fatalf("the server did not stack a session lock on one backend (%v %v %v): the premise changed", a, b, err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}

		// A small set (2) so that a key every shared connection carries
		// is routed to a connection of its own.
		l, inUse := mc.open(t, db, 8, advisory.WithMultiplexing(2))
		key := advisory.KeyOf("mux:twice")
		hold := mustLock(t)(l.TryLock(ctx, key))
		var others []*advisory.Lock
		for i := range 10 {
			others = append(others, mustLock(t)(l.TryLock(ctx, advisory.KeyInt(int64(100+i)))))
		}
		for range 5 {
			if _, err := l.TryLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("TryLock of a key held on a shared connection of the same Locker: %v, want ErrNotAcquired", err)
			}
			if _, err := l.TryRLock(ctx, key); !errors.Is(err, advisory.ErrNotAcquired) {
				t.Fatalf("TryRLock of a key held exclusively by the same Locker: %v, want ErrNotAcquired", err)
			}
		}
		for round := range 20 {
			k := advisory.KeyInt(int64(1000 + round))
			const racers = 16
			var wins atomic.Int32
			var won *advisory.Lock
			var mu sync.Mutex
			var wg sync.WaitGroup
			ready := make(chan struct{})
			for range racers {
				wg.Go(func() {
					<-ready
					lk, err := l.TryLock(ctx, k)
					switch {
					case err == nil:
						wins.Add(1)
						mu.Lock()
						won = lk
						mu.Unlock()
					case !errors.Is(err, advisory.ErrNotAcquired):
						t.Error(err)
					}
				})
			}
			close(ready)
			wg.Wait()
			if n := wins.Load(); n != 1 {
				t.Fatalf("round %d: %d of %d racing TryLocks of one key won, want exactly 1", round, n, racers)
			}
			if pids := holderPIDs(t, conn, k); len(pids) != 1 {
				t.Fatalf("round %d: %d backends hold the key", round, len(pids))
			}
			mustRelease(t, won)
		}
		mustRelease(t, hold)

		// Shared mode: three holds of one key, from one Locker, on three
		// backends (the set's two, then one of its own).
		rkey := advisory.KeyOf("mux:shared")
		var readers []*advisory.Lock
		for range 3 {
			readers = append(readers, mustLock(t)(l.TryRLock(ctx, rkey)))
		}
		if pids := holderPIDs(t, conn, rkey); len(pids) != 3 {
			t.Fatalf("3 shared holds of one key on %d backends, want 3", len(pids))
		}
		if _, err := l.TryLock(ctx, rkey); !errors.Is(err, advisory.ErrNotAcquired) {
			t.Fatalf("TryLock of a key held shared: %v, want ErrNotAcquired", err)
		}
		for _, lk := range append(readers, others...) {
			mustRelease(t, lk)
		}
		nothingLeft(t, conn, inUse)
	})
}

// TestMultiplexedLossLosesOnlyThatConnectionsLocks: with locks spread over
// four shared connections, pg_terminate_backend on one of them closes Lost
// for exactly the locks that lived on it (how soon is
// TestSharedConnectionLossLosesItsLocksByTheNextCheck, under synctest),
// reports that many losses, and frees their keys; every other lock keeps
// its backend in pg_locks, stays unlost and releases cleanly.
func TestMultiplexedLossLosesOnlyThatConnectionsLocks(t *testing.T) {
	forEachMuxBackend(t, func(t *testing.T, mc muxCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		var rec observetest.Recorder
		l, inUse := mc.open(t, db, muxPool, advisory.WithMultiplexing(4),
			advisory.WithKeepalive(lossKeepalive), advisory.WithObserver(&rec))
		other, _ := mc.open(t, db, 4)

		// Four blocking locks, each granted on a connection of its own
		// that then joins the set; then try-onces spread over the set.
		var locks []*advisory.Lock
		for i := range 4 {
			locks = append(locks, mustLock(t)(l.Lock(ctx, advisory.KeyPair(1, int32(i)))))
		}
		for i := range 40 {
			locks = append(locks, mustLock(t)(l.TryLock(ctx, advisory.KeyInt(int64(i)))))
		}
		where := heldByPID(t, conn)
		perPID := map[uint32]int{}
		for _, lk := range locks {
			pid, ok := where[tagKey(lk.Key())]
			if !ok {
				t.Fatalf("%v is not in pg_locks", lk.Key())
			}
			perPID[pid]++
		}
		if len(perPID) != 4 {
			t.Fatalf("44 locks on %d backends, want the 4 of the set: %v", len(perPID), perPID)
		}
		victim := where[tagKey(locks[0].Key())]
		var doomed, kept []*advisory.Lock
		for _, lk := range locks {
			if where[tagKey(lk.Key())] == victim {
				doomed = append(doomed, lk)
			} else {
				kept = append(kept, lk)
			}
		}
		if len(doomed) < 2 {
			t.Fatalf("only %d lock on the victim's connection; the test needs several", len(doomed))
		}

		if err := db.Cluster.TerminateBackend(ctx, victim); err != nil {
			t.Fatal(err)
		}
		for _, lk := range doomed {
			select {
			case <-lk.Lost():
			case <-time.After(30 * time.Second):
				t.Fatalf("Lost of %v never closed after its shared connection's backend was terminated", lk.Key())
			}
			if !errors.Is(lk.Err(), advisory.ErrLost) {
				t.Fatalf("Err of %v after loss: %v", lk.Key(), lk.Err())
			}
		}
		waitUntil(t, "the terminated backend's locks are gone", func() bool { return !backendHolds(t, conn, victim) })
		for _, lk := range kept {
			if isLost(lk) || lk.Err() != nil {
				t.Fatalf("%v, on a connection that was not terminated, reports a loss: %v", lk.Key(), lk.Err())
			}
		}
		now := heldByPID(t, conn)
		for _, lk := range kept {
			if pid := now[tagKey(lk.Key())]; pid != where[tagKey(lk.Key())] {
				t.Fatalf("%v moved from backend %d to %d in pg_locks", lk.Key(), where[tagKey(lk.Key())], pid)
			}
		}
		for _, lk := range doomed {
			if _, ok := now[tagKey(lk.Key())]; ok {
				t.Fatalf("%v is still in pg_locks after its backend was terminated", lk.Key())
			}
			// The key is free for anyone.
			mustRelease(t, mustLock(t)(other.TryLock(ctx, lk.Key())))
			if err := lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
				t.Fatalf("Release of a lost lock: %v, want ErrLost", err)
			}
		}
		if n := rec.Outcomes()[observe.Lost]; n != len(doomed) {
			t.Fatalf("%d Lost events, want %d (the locks of the terminated connection)", n, len(doomed))
		}
		// The set has room again: new locks ride the survivors or a new
		// connection.
		for i := range 10 {
			kept = append(kept, mustLock(t)(l.TryLock(ctx, advisory.KeyInt(int64(500+i)))))
		}
		for _, lk := range kept {
			mustRelease(t, lk)
		}
		nothingLeft(t, conn, inUse)
	})
}

// modelLock is a lock the model holds: its key, mode and backend.
type modelLock struct {
	lk     *advisory.Lock
	key    int64
	shared bool
	pid    uint32
}

// TestMultiplexedLocksMatchModel is a model-based test (rapid) of
// multiplexed session locks: random sequences of TryLock, TryRLock, Lock,
// RLock, Release and pg_terminate_backend of a lock's connection, over 6
// keys, on one Locker (3 shared connections of a pool of 8), checked after
// every step against a model. A try-once is granted iff the model says the
// key is free for its mode (never by stacking on a backend that holds the
// key: each grant adds exactly one backend to the key's holders in
// pg_locks); pg_locks holds exactly the model's locks, each on the backend
// it was granted on; a terminated connection closes Lost for exactly the
// locks the model placed on it, and no other lock reports a loss. After
// each sequence every lock is released and every connection is back in
// the pool. A failure prints rapid's seed and failfile.
func TestMultiplexedLocksMatchModel(t *testing.T) {
	leakCheck(t)
	db := pgtest.New(t)
	ctx := context.Background()
	conn := admin(t, db)
	const keepalive = 50 * time.Millisecond
	const pool = 8
	l, inUse := muxBackends[0].open(t, db, pool, advisory.WithMultiplexing(3),
		advisory.WithKeepalive(keepalive))
	var steps, kills atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		var held []*modelLock
		holders := func(k int64) (ex, sh int) {
			for _, m := range held {
				if m.key == k {
					if m.shared {
						sh++
					} else {
						ex++
					}
				}
			}
			return ex, sh
		}
		// granted checks a new lock against pg_locks: one more backend
		// holds its key, and that backend is the lock's.
		granted := func(k int64, shared bool, lk *advisory.Lock) {
			known := map[uint32]bool{}
			for _, m := range held {
				if m.key == k {
					known[m.pid] = true
				}
			}
			var fresh []uint32
			for _, pid := range holderPIDs(rt, conn, advisory.KeyInt(k)) {
				if !known[pid] {
					fresh = append(fresh, pid)
				}
			}
			if len(fresh) != 1 {
				rt.Fatalf("key %d granted: %d new backends hold it in pg_locks, want exactly 1", k, len(fresh))
			}
			held = append(held, &modelLock{lk: lk, key: k, shared: shared, pid: fresh[0]})
		}
		drop := func(m *modelLock) {
			for i, o := range held {
				if o == m {
					held = append(held[:i], held[i+1:]...)
					return
				}
			}
		}
		// connectionLost checks a lost shared connection: every lock on
		// victim, and no other, reports Lost and releases as ErrLost, and
		// the server lets the backend's locks go.
		connectionLost := func(rt *rapid.T, victim uint32) {
			var doomed []*modelLock
			for _, m := range held {
				if m.pid == victim {
					doomed = append(doomed, m)
				}
			}
			for _, m := range doomed {
				select {
				case <-m.lk.Lost():
				case <-time.After(30 * time.Second):
					rt.Fatalf("Lost of key %d never closed after its backend %d was lost", m.key, victim)
				}
				if err := m.lk.Release(ctx); !errors.Is(err, advisory.ErrLost) {
					rt.Fatalf("Release of a lost lock: %v, want ErrLost", err)
				}
				drop(m)
			}
			// Not heldByPID: a shared key held by the victim and a survivor
			// maps to one of them only.
			waitUntil(rt, "the lost backend's locks are gone", func() bool { return !backendHolds(rt, conn, victim) })
		}
		key := rapid.Int64Range(0, 5)
		// roomy skips an acquisition that could find the pool empty: the
		// connections out of the pool are the backends holding locks
		// (one without locks goes back), and an acquisition takes at
		// most one more.
		roomy := func(rt *rapid.T) {
			pids := map[uint32]bool{}
			for _, m := range held {
				pids[m.pid] = true
			}
			if len(pids) >= pool-1 {
				rt.Skip("the pool could be exhausted")
			}
		}
		try := func(rt *rapid.T, shared bool) {
			roomy(rt)
			k := key.Draw(rt, "key")
			ex, sh := holders(k)
			free := ex == 0 && (shared || sh == 0)
			var lk *advisory.Lock
			var err error
			if shared {
				lk, err = l.TryRLock(ctx, advisory.KeyInt(k))
			} else {
				lk, err = l.TryLock(ctx, advisory.KeyInt(k))
			}
			switch {
			case free && err == nil:
				granted(k, shared, lk)
			case !free && errors.Is(err, advisory.ErrNotAcquired):
			default:
				rt.Fatalf("try (shared %v) of key %d with %d exclusive and %d shared holders: %v", shared, k, ex, sh, err)
			}
		}
		wait := func(rt *rapid.T, shared bool) {
			roomy(rt)
			k := key.Draw(rt, "key")
			if ex, sh := holders(k); ex > 0 || !shared && sh > 0 {
				rt.Skip("a wait would not end") // the model only waits for free keys
			}
			var lk *advisory.Lock
			var err error
			if shared {
				lk, err = l.RLock(ctx, advisory.KeyInt(k))
			} else {
				lk, err = l.Lock(ctx, advisory.KeyInt(k))
			}
			if err != nil {
				rt.Fatalf("wait (shared %v) for free key %d: %v", shared, k, err)
			}
			granted(k, shared, lk)
		}
		defer func() {
			for _, m := range held {
				if err := m.lk.Release(ctx); err != nil && !(errors.Is(err, advisory.ErrLost) && starved(err)) {
					rt.Errorf("release at the end of the sequence: %v", err)
				}
			}
			// A lock lost at the end (a starved check) is let go by the
			// server once its backend reads the closed connection.
			waitUntil(rt, "no advisory lock left", func() bool { return advisoryLocks(rt, conn) == 0 })
			// A connection a kill broke is destroyed, and pgxpool (puddle)
			// destroys in a goroutine of its own: it counts as acquired until
			// that goroutine has run, which a busy machine can delay.
			waitUntil(rt, "every connection back in the pool", func() bool { return inUse() == 0 })
		}()
		rt.Repeat(map[string]func(*rapid.T){
			"TryLock":  func(rt *rapid.T) { try(rt, false) },
			"TryRLock": func(rt *rapid.T) { try(rt, true) },
			"Lock":     func(rt *rapid.T) { wait(rt, false) },
			"RLock":    func(rt *rapid.T) { wait(rt, true) },
			"Release": func(rt *rapid.T) {
				if len(held) == 0 {
					rt.Skip("nothing held")
				}
				m := rapid.SampledFrom(held).Draw(rt, "lock")
				if err := m.lk.Release(ctx); err != nil {
					rt.Fatalf("Release of key %d: %v", m.key, err)
				}
				drop(m)
			},
			"kill": func(rt *rapid.T) {
				// Rarer than the others: each costs a keepalive interval.
				if len(held) == 0 || rapid.Float64Range(0, 1).Draw(rt, "kill?") >= 0.2 {
					rt.Skip("no kill this time")
				}
				victim := rapid.SampledFrom(held).Draw(rt, "victim").pid
				if err := db.Cluster.TerminateBackend(ctx, victim); err != nil {
					rt.Fatal(err)
				}
				kills.Add(1)
				connectionLost(rt, victim)
			},
			"": func(rt *rapid.T) {
				steps.Add(1)
				want := map[[2]int64]bool{}
				for _, m := range slices.Clone(held) {
					if err := m.lk.Err(); err != nil || isLost(m.lk) {
						if !starved(err) {
							rt.Fatalf("key %d on backend %d reports a loss the model does not have: %v", m.key, m.pid, err)
						}
						// A keepalive check had no answer within its bound
						// (a second at least) on a starved machine, and
						// ended the session: for the model, a kill.
						connectionLost(rt, m.pid)
					}
				}
				for _, m := range held {
					want[[2]int64{m.key, int64(m.pid)}] = true
				}
				got := map[[2]int64]bool{}
				rows, err := conn.Query(ctx, `SELECT objid::int8, pid FROM pg_locks
					WHERE locktype = 'advisory' AND granted AND classid = 0 AND objsubid = 1
					AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
				if err != nil {
					rt.Fatal(err)
				}
				for rows.Next() {
					var k, pid int64
					if err := rows.Scan(&k, &pid); err != nil {
						rt.Fatal(err)
					}
					got[[2]int64{k, pid}] = true
				}
				rows.Close()
				if len(got) != len(want) {
					rt.Fatalf("pg_locks holds %v, the model %v", got, want)
				}
				for k := range want {
					if !got[k] {
						rt.Fatalf("pg_locks holds %v, the model %v", got, want)
					}
				}
			},
		})
	})
	t.Logf("%d steps checked against the model, %d connections terminated", steps.Load(), kills.Load())
}

// starved reports whether a lock's loss came from a keepalive check that
// had no answer within its bound (an i/o timeout), as a starved machine
// can cause, rather than from a connection that failed.
func starved(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || pgconn.Timeout(err)
}

// nothingLeft fails t unless, right after every lock was released (each
// release confirmed), no advisory lock is left in the database and no
// connection is out of the pool.
func nothingLeft(t *testing.T, conn *pgx.Conn, inUse func() int) {
	t.Helper()
	if n := advisoryLocks(t, conn); n != 0 {
		t.Fatalf("%d advisory locks left after releasing every lock", n)
	}
	if n := inUse(); n != 0 {
		t.Fatalf("%d connections out of the pool after releasing every lock", n)
	}
}

// distinctHolders counts the granted advisory locks of conn's database and
// the distinct backends holding them.
func distinctHolders(t tb, conn *pgx.Conn) (locks, pids int) {
	t.Helper()
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&locks, &pids); err != nil {
		t.Fatal(err)
	}
	return locks, pids
}

// TestMultiplexedColdBurstOfTryOncesStaysOnTheSet: a fresh Locker with a
// set of 4 on a pool of 8, and 32 goroutines taking 2,000 distinct free
// keys with TryLock at once, holding them. While the set's first
// connections are still opening, a try-once waits for one of them rather
// than pinning a connection of its own: every TryLock succeeds (none waits
// for the pool, which has 4 connections to spare), the 2,000 locks are on
// at most 4 backends in pg_locks, and at most 4 connections are out of the
// pool. The wait timeout is far longer than opening a connection takes, so
// a TryLock that times out waited for something else: the pool, which a
// try-once that pinned a connection of its own exhausts.
func TestMultiplexedColdBurstOfTryOncesStaysOnTheSet(t *testing.T) {
	forEachMuxBackend(t, func(t *testing.T, mc muxCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		const set, pool, workers, keys = 4, 8, 32, 2000
		l, inUse := mc.open(t, db, pool, advisory.WithMultiplexing(set), advisory.WithTimeout(30*time.Second))
		if err := l.Verify(ctx); err != nil { // the probe's connections are closed: the set is cold
			t.Fatal(err)
		}
		// pgxpool destroys a closed connection in a goroutine of its own,
		// and counts it as acquired until then.
		waitUntil(t, "the probe's connections are gone", func() bool { return inUse() == 0 })
		locks := make([]*advisory.Lock, keys)
		errs := make([]error, keys)
		ready := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				<-ready
				for i := w; i < keys; i += workers {
					locks[i], errs[i] = l.TryLock(ctx, advisory.KeyInt(int64(i)))
				}
			})
		}
		close(ready)
		wg.Wait()
		failed := 0
		var first error
		for i, err := range errs {
			if err != nil {
				failed++
				first = cmp.Or(first, err)
				continue
			}
			defer locks[i].Release(ctx) // on a failure below; ErrNotHeld after the releases
		}
		held, pids := distinctHolders(t, conn)
		out := inUse()
		if failed > 0 || held != keys || pids > set || out > set {
			t.Fatalf("%d of %d TryLocks failed (first: %v); pg_locks shows %d locks on %d backends, %d connections out of the pool; want all %d on at most %d",
				failed, keys, first, held, pids, out, keys, set)
		}
		for _, lk := range locks {
			mustRelease(t, lk)
		}
		nothingLeft(t, conn, inUse)
	})
}

// locksPerBackend counts the granted advisory locks of conn's database per
// backend.
func locksPerBackend(t tb, conn *pgx.Conn) map[uint32]int {
	t.Helper()
	m := map[uint32]int{}
	for _, pid := range heldByPID(t, conn) {
		m[pid]++
	}
	return m
}

// TestMultiplexedPlacementGrowsWithConcurrency: the placement the set does
// (docs/advisory.md). TryLocks made one after another on an idle set all
// ride one connection: the set opens another only when every connection
// is busy with a statement. A concurrent burst opens more (at most the
// set's size); after it, each sequential TryLock goes to an idle
// connection with the fewest locks.
func TestMultiplexedPlacementGrowsWithConcurrency(t *testing.T) {
	forEachMuxBackend(t, func(t *testing.T, mc muxCase) {
		leakCheck(t)
		db := pgtest.New(t)
		ctx := context.Background()
		conn := admin(t, db)
		const set = 4
		l, inUse := mc.open(t, db, 8, advisory.WithMultiplexing(set), advisory.WithTimeout(30*time.Second))
		if err := l.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		// pgxpool destroys the probe's closed connections in a goroutine of
		// its own, and counts them as acquired until then.
		waitUntil(t, "the probe's connections are gone", func() bool { return inUse() == 0 })
		var locks []*advisory.Lock
		defer func() {
			for _, lk := range locks {
				lk.Release(ctx) // on a failure; ErrNotHeld after the releases below
			}
		}()
		next := int64(0)
		take := func() *advisory.Lock {
			next++
			lk := mustLock(t)(l.TryLock(ctx, advisory.KeyInt(next)))
			locks = append(locks, lk)
			return lk
		}
		for range 50 {
			take()
		}
		if per := locksPerBackend(t, conn); len(per) != 1 || inUse() != 1 {
			t.Fatalf("50 sequential TryLocks on an idle set: on backends %v, %d connections out of the pool; want one", per, inUse())
		}

		var mu sync.Mutex
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for w := range 16 {
			wg.Go(func() {
				<-ready
				for i := range 20 {
					lk, err := l.TryLock(ctx, advisory.KeyInt(int64(10_000+w*100+i)))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					locks = append(locks, lk)
					mu.Unlock()
				}
			})
		}
		close(ready)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if per := locksPerBackend(t, conn); len(per) > set {
			t.Fatalf("after a burst: locks on %d backends %v, want at most the set's %d", len(per), per, set)
		}
		for range 20 {
			before := locksPerBackend(t, conn)
			fewest := len(locks)
			for _, n := range before {
				fewest = min(fewest, n)
			}
			lk := take()
			pids := holderPIDs(t, conn, lk.Key())
			if len(pids) != 1 || before[pids[0]] != fewest {
				t.Fatalf("a sequential TryLock landed on backend %v holding %d locks; the set's backends held %v", pids, before[pids[0]], before)
			}
		}
		for _, lk := range locks {
			mustRelease(t, lk)
		}
		nothingLeft(t, conn, inUse)
	})
}
