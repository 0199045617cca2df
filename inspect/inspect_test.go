package inspect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
)

// A scene: a named session lock (taken by a Locker that records names)
// held by A, waited for by B (exclusive) and C (shared, queued behind B); a
// transaction lock held by D; a pair key held by E; one lease.
func TestTakeShowsHoldersWaitersAndTheBlockingChain(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	seat := advisory.KeyOf("booking:seat-42")
	report := advisory.KeyOf("report:daily")
	pair := advisory.KeyPair(7, -9)

	locker := advisory.New(db.OpenSQL(), advisory.WithKeyNames(), advisory.WithKeepalive(time.Hour))
	held, err := locker.Lock(ctx, seat)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	var pidA int
	waitUntil(t, "A holds the seat", func() bool {
		probe.QueryRow(ctx, `SELECT coalesce(min(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND objid = $1::int8 & 4294967295`, keyArg(seat)).Scan(&pidA)
		return pidA != 0
	})

	b, c, d, e := session(t, db, "waiter-b"), session(t, db, "waiter-c"), session(t, db, "holder-d"), session(t, db, "holder-e")
	bDone := wait(t, probe, b, "SELECT pg_advisory_lock($1)", keyArg(seat))
	cDone := wait(t, probe, c, "SELECT pg_advisory_lock_shared($1)", keyArg(seat))
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1)", keyArg(report)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Exec(ctx, "SELECT pg_advisory_lock(7, -9)"); err != nil {
		t.Fatal(err)
	}
	if err := lease.Migrate(ctx, db.SQL()); err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(db.SQL()).Acquire(ctx, "nightly-export", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)

	snap, err := inspect.Take(ctx, db.SQL(), inspect.WithNames("report:daily"))
	if err != nil {
		t.Fatal(err)
	}

	seats := locksOf(snap, seat)
	if len(seats) != 3 {
		t.Fatalf("seat: %d rows, want a holder and two waiters: %+v", len(seats), seats)
	}
	a := seats[0]
	if !a.Granted || a.Session.PID != pidA || a.Name != "booking:seat-42" || a.Shared ||
		a.Scope != inspect.ScopeSession || a.AtMost || a.Key.String() != seat.String() {
		t.Errorf("holder: %+v", a)
	}
	bl, ok := byPID(seats, pid(b))
	if !ok || bl.Granted || bl.Shared || bl.Session.ApplicationName != "waiter-b" ||
		!slices.Equal(bl.BlockedBy, []int{pidA}) || bl.AtMost || bl.Scope != inspect.ScopeSession {
		t.Errorf("waiter B: %+v", bl)
	}
	cl, ok := byPID(seats, pid(c))
	if !ok || cl.Granted || !cl.Shared || !slices.Contains(cl.BlockedBy, pidA) || !slices.Contains(cl.BlockedBy, pid(b)) {
		t.Errorf("waiter C must wait for A and for B queued before it: %+v", cl)
	}
	if seats[1].Session.PID != pid(b) || seats[1].For < seats[2].For {
		t.Errorf("waiters are listed longest wait first: %+v", seats[1:])
	}
	if got := snap.Waiters()["booking:seat-42"]; got != 2 {
		t.Errorf("Waiters() = %v", snap.Waiters())
	}

	rep := locksOf(snap, report)
	if len(rep) != 1 || rep[0].Name != "report:daily" || !rep[0].Shared || rep[0].Scope != inspect.ScopeTransaction ||
		rep[0].Session.XactStart.IsZero() || rep[0].Session.ApplicationName != "holder-d" {
		t.Errorf("transaction lock: %+v", rep)
	}
	pl := locksOf(snap, pair)
	if len(pl) != 1 || pl[0].Name != "" || pl[0].KeyLabel() != "(7,-9)" || pl[0].Session.PID != pid(e) {
		t.Errorf("pair lock: %+v", pl)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Name != "nightly-export" || snap.Leases[0].Token != ls.Token() ||
		snap.Leases[0].ExpiresIn <= 0 || snap.Leases[0].ExpiresIn > time.Minute {
		t.Errorf("leases: %+v", snap.Leases)
	}

	// Unblock: the waiters get the lock in turn and report no error.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	b.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	if err := <-cDone; err != nil {
		t.Fatal(err)
	}
}

// The wait time is pg_locks.waitstart: exact (not a bound), to the
// microsecond the server recorded, so it grows exactly as the server's
// clock does between two snapshots.
func TestTakeMeasuresWaitsFromTheServer(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	k := advisory.KeyOf("wait:measured")
	holder, waiter := session(t, db, "holder"), session(t, db, "waiter")
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", keyArg(k)); err != nil {
		t.Fatal(err)
	}
	done := wait(t, probe, waiter, "SELECT pg_advisory_lock($1)", keyArg(k))
	var waitStart time.Time
	if err := probe.QueryRow(ctx, "SELECT waitstart FROM pg_locks WHERE pid = $1 AND NOT granted", pid(waiter)).Scan(&waitStart); err != nil {
		t.Fatal(err)
	}
	var prev inspect.Lock
	var prevAt time.Time
	for i := 0; i < 2; i++ {
		snap, err := inspect.Take(ctx, db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		w, ok := byPID(locksOf(snap, k), pid(waiter))
		if !ok || w.AtMost || w.For != snap.At.Sub(waitStart) {
			t.Fatalf("waiter: %+v, want exactly %v (since waitstart)", w, snap.At.Sub(waitStart))
		}
		if i == 1 && w.For-prev.For != snap.At.Sub(prevAt) {
			t.Fatalf("the wait grew by %v while the server's clock moved %v", w.For-prev.For, snap.At.Sub(prevAt))
		}
		prev, prevAt = w, snap.At
	}
	holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Each key's name is written once per Locker: a name deleted from the
// table after the first lock is not written again by the same Locker.
func TestKeyNamesAreWrittenOncePerKeyPerLocker(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	probe := session(t, db, "probe")
	l := advisory.New(db.OpenSQL(), advisory.WithKeyNames())
	k := advisory.KeyOf("once:per-key")
	count := func() (n int) {
		t.Helper()
		if err := probe.QueryRow(ctx, "SELECT count(*) FROM sqlock_key_names WHERE key = $1 AND name = 'once:per-key'",
			keyArg(k)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; i < 3; i++ {
		if err := l.Do(ctx, k, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if count() != 1 {
				t.Fatal("the first lock did not record the name")
			}
			probe.Exec(ctx, "DELETE FROM sqlock_key_names")
		}
	}
	if count() != 0 {
		t.Fatal("a later lock of the same key wrote its name again")
	}
	// A key without text writes nothing; a 32-bit KeyText key is named too.
	if err := l.Do(ctx, advisory.KeyInt(42), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	kt := advisory.KeyText("legacy:job")
	if err := l.Do(ctx, kt, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, _ := probe.Query(ctx, "SELECT name FROM sqlock_key_names ORDER BY name")
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	if !slices.Equal(names, []string{"legacy:job"}) {
		t.Fatalf("names = %q", names)
	}
}

// A role that may not create the table still takes its locks: the
// recording turns itself off.
func TestKeyNamesWithoutPrivilegeNeverFailALock(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	admin := session(t, db, "admin")
	role := "sqlock_noddl_" + strings.ToLower(db.Name[len(db.Name)-6:])
	for _, s := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", role),
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
	} {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { dropRole(t, db, role) })
	l := advisory.New(openAs(t, db, role), advisory.WithKeyNames())
	for _, name := range []string{"a", "b", "a"} {
		if err := l.Do(ctx, advisory.KeyOf(name), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("lock %q: %v", name, err)
		}
	}
	var exists bool
	admin.QueryRow(ctx, "SELECT to_regclass('sqlock_key_names') IS NOT NULL").Scan(&exists)
	if exists {
		t.Fatal("the table was created by a role without CREATE")
	}
}

// Without pg_read_all_stats, a role sees other roles' locks but not their
// sessions: Take says what is missing instead of showing holderless locks.
func TestTakeWithoutReadAllStatsSaysWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	admin := session(t, db, "admin")
	role := "sqlock_ro_" + strings.ToLower(db.Name[len(db.Name)-6:])
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropRole(t, db, role) })
	ro := openAs(t, db, role)

	// Nothing held by others: an honest empty snapshot.
	if snap, err := inspect.Take(ctx, ro); err != nil || len(snap.Locks) != 0 {
		t.Fatalf("empty: %v %+v", err, snap)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(1)"); err != nil {
		t.Fatal(err)
	}
	_, err := inspect.Take(ctx, ro)
	if !errors.Is(err, inspect.ErrPrivilege) || !strings.Contains(err.Error(), "pg_read_all_stats") ||
		!strings.Contains(err.Error(), role) {
		t.Fatalf("err = %v", err)
	}
	if _, err := admin.Exec(ctx, "GRANT pg_read_all_stats TO "+role); err != nil {
		t.Fatal(err)
	}
	snap, err := inspect.Take(ctx, ro)
	if err != nil || len(snap.Locks) != 1 || snap.Locks[0].Session.ApplicationName != "admin" {
		t.Fatalf("with pg_read_all_stats: %v %+v", err, snap)
	}
}

// dropRole drops a role made by a test (roles belong to the cluster).
func dropRole(t testing.TB, db *pgtest.DB, role string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.Cluster.AdminDSN())
	if err != nil {
		t.Log(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
		t.Log(err)
	}
}

func TestTakeRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if _, err := inspect.Take(ctx, nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil: %v", err)
	}
	if _, err := inspect.Take(ctx, (*sql.DB)(nil)); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("nil *sql.DB: %v", err)
	}
	// A bad name is an invalid option and an invalid argument.
	bad := func(err error) bool {
		return errors.Is(err, sqlock.ErrInvalidOption) && errors.Is(err, sqlock.ErrInvalidArgument)
	}
	if _, err := inspect.Take(ctx, db.SQL(), inspect.WithNames("")); !bad(err) {
		t.Errorf("empty name: %v", err)
	}
	for _, table := range []string{"", "a;drop table x", "a.b.c", "1abc", `"x"`} {
		if _, err := inspect.Take(ctx, db.SQL(), inspect.WithLeaseTable(table)); !bad(err) {
			t.Errorf("lease table %q: %v", table, err)
		}
	}
	// A name that does not hash to a key is never shown for it.
	conn := session(t, db, "liar")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(12345)"); err != nil {
		t.Fatal(err)
	}
	snap, err := inspect.Take(ctx, db.SQL(), inspect.WithNames("not-12345"))
	if err != nil || len(snap.Locks) != 1 || snap.Locks[0].Name != "" || snap.Locks[0].KeyLabel() != "12345" {
		t.Fatalf("%v %+v", err, snap)
	}
}

// A hold's time is exact only when the session's last statement is known
// to have taken that lock; otherwise it is an upper bound.
func TestHoldTimesAreExactOnlyWhenKnown(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	conn := session(t, db, "two-locks")
	k1, k2 := advisory.KeyOf("hold:first"), advisory.KeyOf("hold:second")
	take := func() (a, b inspect.Lock) {
		t.Helper()
		snap, err := inspect.Take(ctx, db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		l1, l2 := locksOf(snap, k1), locksOf(snap, k2)
		if len(l1) != 1 || len(l2) != 1 {
			t.Fatalf("%+v", snap.Locks)
		}
		return l1[0], l2[0]
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", keyArg(k1)); err != nil {
		t.Fatal(err)
	}
	// The only lock, but its key a bind parameter: the statement may as
	// well have been a failed try of another key (see
	// TestHoldAfterAFailedTryOfAnotherKeyIsABound).
	if a, _ := inspectOne(t, db, k1); !a.AtMost {
		t.Errorf("the only lock, its key not in the statement: %+v", a)
	}
	// A second lock by a statement that does not show its key: neither is known.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", keyArg(k2)); err != nil {
		t.Fatal(err)
	}
	if a, b := take(); !a.AtMost || !b.AtMost {
		t.Errorf("two locks, key not in the statement: %+v %+v", a, b)
	}
	// The statement names its key: that lock is exact, the other a bound.
	conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", keyArg(k2))
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d)", keyArg(k2))); err != nil {
		t.Fatal(err)
	}
	if a, b := take(); !a.AtMost || b.AtMost || a.For < b.For {
		t.Errorf("key in the statement: first %+v, second %+v", a, b)
	}
	// After an unlock, no hold is exact.
	conn.Exec(ctx, "SELECT pg_advisory_unlock(1)")
	if a, b := take(); !a.AtMost || !b.AtMost {
		t.Errorf("after an unlock: %+v %+v", a, b)
	}
}

func inspectOne(t *testing.T, db *pgtest.DB, k advisory.Key) (inspect.Lock, bool) {
	t.Helper()
	snap, err := inspect.Take(context.Background(), db.SQL())
	if err != nil {
		t.Fatal(err)
	}
	ls := locksOf(snap, k)
	if len(ls) != 1 {
		t.Fatalf("%+v", snap.Locks)
	}
	return ls[0], true
}
