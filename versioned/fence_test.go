package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

// fencedOrders is a table whose rows carry a version and a fence (NULL:
// never written under a lock).
func fencedOrders(t *testing.T) (*pgtest.DB, *sql.DB) {
	t.Helper()
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE orders (
		id bigint PRIMARY KEY,
		status text NOT NULL,
		version bigint NOT NULL DEFAULT 1,
		fence bigint)`)
	pg.Exec(`INSERT INTO orders (id, status) VALUES (1, 'new'), (2, 'new')`)
	return pg, pg.SQL()
}

var ordersT = versioned.MustTable("orders")

// Order is a fenced struct: its Fence field receives the token of the
// lock holder that wrote it.
type Order struct {
	ID      int64
	Status  string
	Version int64 `lock:"version"`
	Fence   int64 `lock:"fence"`
}

// takeover plays the paused holder: old takes the lease, its lease
// expires on the server (as if old had been paused past its TTL), and new
// takes it over with a larger token. old still believes it holds it.
func takeover(t *testing.T, pg *pgtest.DB, name string) (old, new *lease.Lease) {
	t.Helper()
	ctx := ctxT(t)
	db := pg.SQL()
	if err := lease.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	m := lease.New(db)
	// The takeover is made on the server (expires_at moved into the past),
	// so the TTL only has to outlast the test on old's side: old must
	// still believe it holds the lease (its Context live), at any speed.
	const ttl = time.Hour
	old, err := m.TryAcquire(ctx, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Release(context.Background()) })
	if _, err := db.ExecContext(ctx, `UPDATE sqlock_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	new, err = m.TryAcquire(ctx, name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { new.Release(context.Background()) })
	if new.Token() <= old.Token() {
		t.Fatalf("tokens %d then %d", old.Token(), new.Token())
	}
	return old, new
}

func readOrder(t *testing.T, db *sql.DB, id int64) (status string, version int64, fence sql.NullInt64) {
	t.Helper()
	if err := db.QueryRow(`SELECT status, version, fence FROM orders WHERE id = $1`, id).Scan(&status, &version, &fence); err != nil {
		t.Fatal(err)
	}
	return
}

// A holder whose lease was taken over is refused by the row itself once
// the new holder has written it: by key with Fence, and as a struct with
// the token in the context.
func TestFencedWriteRefusedAfterLeaseTakeover(t *testing.T) {
	ctx := ctxT(t)
	pg, db := fencedOrders(t)
	old, new := takeover(t, pg, "orders")

	// Both read the row at version 1; the new holder writes first.
	v, err := versioned.Update(ctx, db, ordersT, int64(1), int64(1), versioned.Set("status", "paid"), versioned.Fence("fence", new.Token()))
	if err != nil || v != 2 {
		t.Fatalf("new holder: %d %v", v, err)
	}
	before := snapshot(t, db, "orders")
	// The old holder, at the version it read: fenced, not merely stale.
	_, err = versioned.Update(ctx, db, ordersT, int64(1), int64(1), versioned.Set("status", "refunded"), versioned.Fence("fence", old.Token()))
	var fe *versioned.FencedError
	if !errors.As(err, &fe) || !errors.Is(err, versioned.ErrFenced) || errors.Is(err, versioned.ErrStale) {
		t.Fatalf("old holder: %v", err)
	}
	if fe.Token != old.Token() || fe.Current != new.Token() || fe.Op != "update" || fe.Table != "orders" || fe.Key != int64(1) {
		t.Fatalf("FencedError = %+v", fe)
	}
	// The old holder, even at the current version: fenced.
	_, err = versioned.Update(ctx, db, ordersT, int64(1), int64(2), versioned.Set("status", "refunded"), versioned.Fence("fence", old.Token()))
	if !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder at the current version: %v", err)
	}
	if err := versioned.Delete(ctx, db, ordersT, int64(1), int64(2), versioned.Fence("fence", old.Token())); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder's delete: %v", err)
	}
	// Struct writes, token from the context.
	o := Order{ID: 1, Status: "refunded", Version: 2}
	err = versioned.UpdateStruct(sqlock.WithFencingToken(ctx, old.Token()), db, ordersT, &o, versioned.Set("status", o.Status))
	if !errors.Is(err, versioned.ErrFenced) || o.Version != 2 || o.Fence != 0 {
		t.Fatalf("old holder's struct: %v %+v", err, o)
	}
	if err := versioned.DeleteStruct(sqlock.WithFencingToken(ctx, old.Token()), db, ordersT, &o); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder's struct delete: %v", err)
	}
	if after := snapshot(t, db, "orders"); after != before {
		t.Fatalf("a fenced-out write changed the table:\n%s\n%s", before, after)
	}
	// The new holder writes again (an equal token) as a struct.
	o = Order{ID: 1, Status: "shipped", Version: 2}
	if err := versioned.UpdateStruct(sqlock.WithFencingToken(ctx, new.Token()), db, ordersT, &o, versioned.Set("status", o.Status)); err != nil {
		t.Fatal(err)
	}
	if o.Version != 3 || o.Fence != new.Token() {
		t.Fatalf("struct after the write: %+v", o)
	}
	if s, v, f := readOrder(t, db, 1); s != "shipped" || v != 3 || f.Int64 != new.Token() {
		t.Fatalf("row: %s %d %v", s, v, f)
	}
	if err := versioned.DeleteStruct(sqlock.WithFencingToken(ctx, new.Token()), db, ordersT, &o); err != nil {
		t.Fatal(err)
	}
}

// Zero rows from a fenced write is one of three things, each its own
// error: fenced out (a larger fence), stale (another version, fence not
// past the token) or gone (no row). A fenced refusal is not retried.
func TestFencedWriteToldApartFromStaleAndMissing(t *testing.T) {
	ctx := ctxT(t)
	_, db := fencedOrders(t)
	if _, err := db.Exec(`UPDATE orders SET fence = 10, version = 5 WHERE id = 1; UPDATE orders SET fence = 3, version = 5 WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		id, ver int64
		tok     int64
		check   func(error) bool
	}{
		{"fenced", 1, 5, 9, func(err error) bool {
			var fe *versioned.FencedError
			return errors.As(err, &fe) && fe.Current == 10 && fe.Token == 9 && !errors.Is(err, versioned.ErrStale)
		}},
		{"fenced and stale", 1, 4, 9, func(err error) bool { return errors.Is(err, versioned.ErrFenced) }},
		{"stale", 2, 4, 9, func(err error) bool {
			var se *versioned.StaleError
			return errors.As(err, &se) && se.Probed && !se.Gone && se.Current == 5 && !errors.Is(err, versioned.ErrFenced)
		}},
		{"missing", 3, 1, 9, func(err error) bool {
			var se *versioned.StaleError
			return errors.As(err, &se) && se.Probed && se.Gone && !errors.Is(err, versioned.ErrFenced)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := versioned.Update(ctx, db, ordersT, c.id, c.ver, versioned.Fence("fence", c.tok))
			if !c.check(err) {
				t.Fatalf("update: %v", err)
			}
			if err := versioned.Delete(ctx, db, ordersT, c.id, c.ver, versioned.Fence("fence", c.tok)); !c.check(err) {
				t.Fatalf("delete: %v", err)
			}
		})
	}
	// retry stops at once on a fenced write and retries a stale one.
	calls := 0
	err := retry.Do(ctx, func(ctx context.Context) error {
		calls++
		_, err := versioned.Update(ctx, db, ordersT, int64(1), int64(5), versioned.Fence("fence", 9))
		return err
	}, retry.WithMaxAttempts(3))
	if !errors.Is(err, versioned.ErrFenced) || calls != 1 {
		t.Fatalf("retry of a fenced write: %d calls, %v", calls, err)
	}
}

// A NULL fence counts as 0: the first fenced write passes and sets it; an
// equal token (the same holder again) passes; a smaller one is refused.
func TestFencedWriteNullFenceAndEqualToken(t *testing.T) {
	ctx := ctxT(t)
	_, db := fencedOrders(t)
	v, err := versioned.Update(ctx, db, ordersT, int64(1), int64(1), versioned.Fence("fence", 7))
	if err != nil {
		t.Fatal(err)
	}
	if v, err = versioned.Update(ctx, db, ordersT, int64(1), v, versioned.Set("status", "again"), versioned.Fence("fence", 7)); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	if _, err := versioned.Update(ctx, db, ordersT, int64(1), v, versioned.Fence("fence", 6)); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("smaller token: %v", err)
	}
	if s, ver, f := readOrder(t, db, 1); s != "again" || ver != 3 || f.Int64 != 7 {
		t.Fatalf("row: %s %d %v", s, ver, f)
	}
	// An unfenced write leaves the fence alone.
	if _, err := versioned.Update(ctx, db, ordersT, int64(1), int64(3), versioned.Set("status", "admin")); err != nil {
		t.Fatal(err)
	}
	if _, _, f := readOrder(t, db, 1); f.Int64 != 7 {
		t.Fatalf("fence after an unfenced write: %v", f)
	}
}

type tinyFence struct {
	ID      int64
	Version int64 `lock:"version"`
	Fence   int8  `lock:"fence"`
}

// Bad fencing input is refused before anything is sent.
func TestFencedWriteBadInputSendsNothing(t *testing.T) {
	ctx := ctxT(t)
	_, db := fencedOrders(t)
	c := &counting{db: db}
	before := snapshot(t, db, "orders")
	o := Order{ID: 1, Version: 1}
	tok := sqlock.WithFencingToken(ctx, 5)
	for name, call := range map[string]func() error{
		"zero token": func() error {
			_, err := versioned.Update(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("fence", 0))
			return err
		},
		"negative token": func() error {
			return versioned.Delete(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("fence", -3))
		},
		"two fences": func() error {
			_, err := versioned.Update(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("fence", 1), versioned.Fence("fence", 2))
			return err
		},
		"fence on the version column": func() error {
			_, err := versioned.Update(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("version", 1))
			return err
		},
		"fence on the key column": func() error {
			return versioned.Delete(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("id", 1))
		},
		"fence column assigned": func() error {
			_, err := versioned.Update(ctx, c, ordersT, int64(1), int64(1), versioned.Set("fence", 1), versioned.Fence("fence", 1))
			return err
		},
		"assignment to a delete": func() error {
			return versioned.Delete(ctx, c, ordersT, int64(1), int64(1), versioned.Set("status", "x"))
		},
		"bad fence column": func() error {
			_, err := versioned.Update(ctx, c, ordersT, int64(1), int64(1), versioned.Fence("", 1))
			return err
		},
		"struct without a token": func() error { return versioned.UpdateStruct(ctx, c, ordersT, &o) },
		"struct delete without a token": func() error {
			return versioned.DeleteStruct(ctx, c, ordersT, &o)
		},
		"struct with a non-positive token": func() error {
			return versioned.UpdateStruct(sqlock.WithFencingToken(ctx, 0), c, ordersT, &o)
		},
		"struct with a Fence argument too": func() error {
			return versioned.UpdateStruct(tok, c, ordersT, &o, versioned.Fence("fence", 5))
		},
	} {
		err := call()
		if !errors.Is(err, versioned.ErrInvalidArg) {
			t.Errorf("%s: %v, want ErrInvalidArg", name, err)
		}
	}
	// A token the fence field cannot hold.
	tf := tinyFence{ID: 1, Version: 1}
	if err := versioned.UpdateStruct(sqlock.WithFencingToken(ctx, 300), c, ordersT, &tf); !errors.Is(err, versioned.ErrOverflow) {
		t.Errorf("token past an int8 fence: %v", err)
	}
	if n := c.execs.Load() + c.queries.Load(); n != 0 {
		t.Fatalf("refused calls sent %d statements", n)
	}
	if o != (Order{ID: 1, Version: 1}) || tf != (tinyFence{ID: 1, Version: 1}) {
		t.Fatalf("refused calls changed the struct: %+v %+v", o, tf)
	}
	if after := snapshot(t, db, "orders"); after != before {
		t.Fatal("refused calls changed the table")
	}
}

// The fenced statements, per dialect: the token is written with the bump
// and compared last, a NULL fence counting as 0.
func TestFencedWriteSQL(t *testing.T) {
	for _, c := range []struct {
		d              versioned.Dialect
		update, delete string
	}{
		{versioned.Postgres,
			`UPDATE "orders" SET "status" = $1, "version" = "version" + 1, "fence" = $2 WHERE "id" = $3 AND "version" = $4 AND COALESCE("fence", 0) <= $5`,
			`DELETE FROM "orders" WHERE "id" = $1 AND "version" = $2 AND COALESCE("fence", 0) <= $3`},
		{versioned.MySQL,
			"UPDATE `orders` SET `status` = ?, `version` = `version` + 1, `fence` = ? WHERE `id` = ? AND `version` = ? AND COALESCE(`fence`, 0) <= ?",
			"DELETE FROM `orders` WHERE `id` = ? AND `version` = ? AND COALESCE(`fence`, 0) <= ?"},
		{versioned.SQLite,
			`UPDATE "orders" SET "status" = ?, "version" = "version" + 1, "fence" = ? WHERE "id" = ? AND "version" = ? AND COALESCE("fence", 0) <= ?`,
			`DELETE FROM "orders" WHERE "id" = ? AND "version" = ? AND COALESCE("fence", 0) <= ?`},
	} {
		tb := versioned.MustTable("orders", versioned.WithDialect(c.d))
		u, err := tb.FencedUpdateSQL("fence", "status")
		if err != nil || u != c.update {
			t.Errorf("%s update:\n got %s %v\nwant %s", c.d, u, err, c.update)
		}
		if d := tb.FencedDeleteSQL("fence"); d != c.delete {
			t.Errorf("%s delete:\n got %s\nwant %s", c.d, d, c.delete)
		}
	}
}

// Many holders, each with its own token, race fenced writes to one row
// (re-reading on a stale version). In the database: every write that
// landed is in history, in commit order (the row lock orders the inserts),
// and its tokens never go down; the final fence is the largest token that
// wrote, and the largest token always writes.
func TestFencedWritesRaceNeverLandOlderAfterNewer(t *testing.T) {
	ctx := ctxT(t)
	_, db := fencedOrders(t)
	if _, err := db.Exec(`CREATE TABLE history (seq bigserial PRIMARY KEY, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const holders, writes = 16, 5
	tokens := rand.Perm(holders)
	var fenced atomic.Int64
	wrote := make([]bool, holders+1)
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, holders)
	for _, p := range tokens {
		tok := int64(p + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range writes {
				err := retry.Do(ctx, func(ctx context.Context) error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					var v int64
					if err := tx.QueryRowContext(ctx, `SELECT version FROM orders WHERE id = 1`).Scan(&v); err != nil {
						return err
					}
					if _, err := versioned.Update(ctx, tx, ordersT, int64(1), v, versioned.Set("status", fmt.Sprint(tok)), versioned.Fence("fence", tok)); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `INSERT INTO history (token) VALUES ($1)`, tok); err != nil {
						return err
					}
					return tx.Commit()
				}, retry.WithMaxAttempts(1000), retry.WithBackoff(retry.Constant(0)))
				switch {
				case errors.Is(err, versioned.ErrFenced):
					fenced.Add(1)
					return // the lock is lost: stop writing
				case err != nil:
					errs <- fmt.Errorf("token %d: %w", tok, err)
					return
				}
				wrote[tok] = true
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT token FROM history ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev, n, maxTok int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok < prev {
			t.Fatalf("token %d landed after %d", tok, prev)
		}
		prev, n, maxTok = tok, n+1, max(maxTok, tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_, ver, f := readOrder(t, db, 1)
	if f.Int64 != maxTok || maxTok != holders || !wrote[holders] {
		t.Fatalf("final fence %v, largest token written %d, want %d", f, maxTok, holders)
	}
	if ver != 1+n {
		t.Fatalf("version %d after %d writes", ver, n)
	}
	t.Logf("%d writes landed, %d holders fenced out", n, fenced.Load())
}

// countingSQL is a one-connection *sql.DB on the harness's counting
// driver: its count is the round trips on the wire.
func countingSQL(t *testing.T, pg *pgtest.DB) (*sql.DB, *matrix.RoundTrips) {
	t.Helper()
	var rt matrix.RoundTrips
	db, err := matrix.OpenSQL(pg.DSN, &rt)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	t.Cleanup(func() { db.Close() })
	return db, &rt
}

// A fenced write that succeeds costs what the unfenced one costs: one
// round trip, counted on the wire. Only a refusal adds one, to say why.
func TestFencedWriteCostsNoExtraRoundTrip(t *testing.T) {
	ctx := ctxT(t)
	pg, _ := fencedOrders(t)
	db, writes := countingSQL(t, pg)
	count := func(f func() error) int64 {
		t.Helper()
		before := writes.Load()
		if err := f(); err != nil && !errors.Is(err, versioned.ErrFenced) {
			t.Fatal(err)
		}
		return writes.Load() - before
	}
	v := int64(1)
	plain := func() (err error) {
		v, err = versioned.Update(ctx, db, ordersT, int64(1), v, versioned.Set("status", "a"))
		return err
	}
	fenced := func() (err error) {
		v, err = versioned.Update(ctx, db, ordersT, int64(1), v, versioned.Set("status", "a"), versioned.Fence("fence", 5))
		return err
	}
	o := Order{ID: 2, Status: "b", Version: 1}
	fctx := sqlock.WithFencingToken(ctx, 5)
	structW := func() error { return versioned.UpdateStruct(fctx, db, ordersT, &o, versioned.Set("status", "b")) }
	refused := func() error {
		_, err := versioned.Update(ctx, db, ordersT, int64(1), v, versioned.Fence("fence", 4))
		return err
	}
	for _, f := range []func() error{plain, fenced, structW, refused} { // warm the statement cache
		count(f)
	}
	p, f, s, r := count(plain), count(fenced), count(structW), count(refused)
	if f != p || s != p || r != p+1 {
		t.Fatalf("round trips: unfenced %d, fenced %d, struct %d (want %d), refused %d (want %d)", p, f, s, p, r, p+1)
	}
	t.Logf("round trips: unfenced update %d, fenced %d, fenced struct %d, refused %d", p, f, s, r)
}

// A lease's Context carries its fencing token, so struct writes made with
// it are fenced with no extra line: the new holder's land, the old
// holder's are refused by the row.
func TestLeaseContextFencesStructWrites(t *testing.T) {
	ctx := ctxT(t)
	pg, db := fencedOrders(t)
	old, new := takeover(t, pg, "orders-ctx")
	newCtx, cancelNew := new.Context(ctx)
	defer cancelNew()
	if tok, ok := sqlock.FencingToken(newCtx); !ok || tok != new.Token() {
		t.Fatalf("the lease's context carries token %d (%t), want %d", tok, ok, new.Token())
	}
	o := Order{ID: 1, Status: "paid", Version: 1}
	if err := versioned.UpdateStruct(newCtx, db, ordersT, &o, versioned.Set("status", o.Status)); err != nil {
		t.Fatal(err)
	}
	if o.Fence != new.Token() {
		t.Fatalf("fence field %d, want the new holder's token %d", o.Fence, new.Token())
	}
	before := snapshot(t, db, "orders")
	// The old holder still believes it holds the lease (its local deadline
	// has not passed), so its context is live: only the row can refuse it.
	oldCtx, cancelOld := old.Context(ctx)
	defer cancelOld()
	stale := Order{ID: 1, Status: "refunded", Version: 2}
	if err := versioned.UpdateStruct(oldCtx, db, ordersT, &stale, versioned.Set("status", stale.Status)); !errors.Is(err, versioned.ErrFenced) {
		t.Fatalf("old holder's write through its lease's context: %v, want ErrFenced", err)
	}
	if after := snapshot(t, db, "orders"); after != before {
		t.Fatalf("a fenced-out write changed the table:\n%s\n%s", before, after)
	}
}
