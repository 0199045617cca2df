package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/sqlock/sqlock"
	"math"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/internal/vmodel"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	pgtest.Main(m, mariatest.Close)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// snapshot returns every row of table as text, in a stable order.
func snapshot(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	var s sql.NullString
	q := fmt.Sprintf(`SELECT string_agg(r::text, ' | ' ORDER BY r::text) FROM %s r`, table)
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatalf("snapshot %s: %v", table, err)
	}
	return s.String
}

// counting wraps a handle and counts the statements that reach it, to prove
// that refused calls send nothing.
type counting struct {
	db      *sql.DB
	execs   atomic.Int64
	queries atomic.Int64
}

func (c *counting) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.execs.Add(1)
	return c.db.ExecContext(ctx, q, args...)
}

func (c *counting) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.queries.Add(1)
	return c.db.QueryRowContext(ctx, q, args...)
}

// rowChanged reports a probe that found the row at another version (or
// NULL): the row is there and changed.
func rowChanged(se *versioned.StaleError) bool {
	return se.Probed && !se.Gone && (se.CurrentNull || se.Current != se.Expected)
}

func accountsDB(t *testing.T) *sql.DB {
	t.Helper()
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE accounts (
		id bigint PRIMARY KEY,
		owner text NOT NULL,
		balance bigint NOT NULL,
		version bigint NOT NULL DEFAULT 0)`)
	pg.Exec(`INSERT INTO accounts (id, owner, balance, version) VALUES (1, 'ann', 100, 0), (2, 'bob', 50, 7)`)
	return pg.SQL()
}

func readAccount(t *testing.T, db *sql.DB, id int64) (owner string, balance, version int64) {
	t.Helper()
	if err := db.QueryRow(`SELECT owner, balance, version FROM accounts WHERE id = $1`, id).
		Scan(&owner, &balance, &version); err != nil {
		t.Fatalf("read account %d: %v", id, err)
	}
	return
}

func TestUpdateAndStale(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	rec := &observetest.Recorder{}
	accounts := versioned.MustTable("accounts", versioned.WithObserver(rec))

	v, err := versioned.Update(ctx, db, accounts, int64(1), int64(0), versioned.Set("balance", 90), versioned.Set("owner", "ann b."))
	if err != nil || v != 1 {
		t.Fatalf("Update = %d, %v; want 1, nil", v, err)
	}
	if o, b, ver := readAccount(t, db, 1); o != "ann b." || b != 90 || ver != 1 {
		t.Fatalf("row = %q %d %d", o, b, ver)
	}
	before := snapshot(t, db, "accounts")

	// A writer that still holds version 0 loses and changes nothing.
	v, err = versioned.Update(ctx, db, accounts, int64(1), int64(0), versioned.Set("balance", 0))
	if v != 0 || !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale Update = %d, %v; want 0, ErrStale", v, err)
	}
	var se *versioned.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("not a *StaleError: %T", err)
	}
	if se.Table != "accounts" || se.Key != int64(1) || se.Expected != 0 || se.Op != "update" ||
		se.Probed || se.RetryCause() != "stale" {
		t.Fatalf("StaleError = %+v", *se)
	}
	if got := snapshot(t, db, "accounts"); got != before {
		t.Fatalf("stale write changed rows:\n%s\n%s", before, got)
	}
	if ev := rec.Events(); len(ev) != 1 || ev[0].Kind != observe.Stale || ev[0].Source != "versioned" ||
		ev[0].Table != "accounts" || !errors.Is(ev[0].Err, versioned.ErrStale) {
		t.Fatalf("observer got %+v", ev)
	}
	if !strings.Contains(err.Error(), "update of accounts key 1 at version 0") {
		t.Fatalf("message %q", err)
	}

	// A touch (no assignments) bumps the version only.
	if v, err = versioned.Update(ctx, db, accounts, int64(1), int64(1)); err != nil || v != 2 {
		t.Fatalf("touch = %d, %v", v, err)
	}
	if _, b, ver := readAccount(t, db, 1); b != 90 || ver != 2 {
		t.Fatalf("after touch: balance %d version %d", b, ver)
	}
}

func TestProbe(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	accounts := versioned.MustTable("accounts", versioned.WithProbe())

	_, err := versioned.Update(ctx, db, accounts, int64(2), int64(3), versioned.Set("balance", 1))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !rowChanged(se) || se.Current != 7 || se.Gone {
		t.Fatalf("changed row: %v (%+v)", err, se)
	}
	if !strings.Contains(err.Error(), "now at version 7") {
		t.Fatalf("message %q", err)
	}
	_, err = versioned.Update(ctx, db, accounts, int64(99), int64(3), versioned.Set("balance", 1))
	if !errors.As(err, &se) || !se.Probed || !se.Gone {
		t.Fatalf("missing row: %v", err)
	}
	err = versioned.Delete(ctx, db, accounts, int64(2), int64(6))
	if !errors.As(err, &se) || se.Op != "delete" || !rowChanged(se) || se.Current != 7 {
		t.Fatalf("stale delete: %v", err)
	}
	if err := versioned.Delete(ctx, db, accounts, int64(2), int64(7)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	err = versioned.Delete(ctx, db, accounts, int64(2), int64(7))
	if !errors.As(err, &se) || !se.Gone {
		t.Fatalf("delete of a deleted row: %v", err)
	}
	// Probing costs nothing on success: exactly one statement.
	c := &counting{db: db}
	if _, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("balance", 5)); err != nil {
		t.Fatal(err)
	}
	if c.execs.Load() != 1 || c.queries.Load() != 0 {
		t.Fatalf("successful update with probing: %d execs, %d queries", c.execs.Load(), c.queries.Load())
	}
	// And one query on conflict.
	if _, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("balance", 5)); !errors.Is(err, versioned.ErrStale) {
		t.Fatal(err)
	}
	if c.execs.Load() != 2 || c.queries.Load() != 1 {
		t.Fatalf("stale update with probing: %d execs, %d queries", c.execs.Load(), c.queries.Load())
	}
}

func TestDelete(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	accounts := versioned.MustTable("accounts")
	before := snapshot(t, db, "accounts")
	if err := versioned.Delete(ctx, db, accounts, int64(2), int64(6)); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale delete: %v", err)
	}
	if snapshot(t, db, "accounts") != before {
		t.Fatal("stale delete changed rows")
	}
	if err := versioned.Delete(ctx, db, accounts, int64(2), int64(7)); err != nil {
		t.Fatal(err)
	}
	var n int
	db.QueryRow(`SELECT count(*) FROM accounts`).Scan(&n)
	if n != 1 {
		t.Fatalf("%d rows left", n)
	}
}

func TestTxAndConn(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	accounts := versioned.MustTable("accounts", versioned.WithProbe())

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := versioned.Update(ctx, tx, accounts, int64(1), int64(5), versioned.Set("balance", 1)); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale in tx: %v", err)
	}
	// A stale write (and its probe) does not abort a PostgreSQL transaction.
	if v, err := versioned.Update(ctx, tx, accounts, int64(1), int64(0), versioned.Set("balance", 1)); err != nil || v != 1 {
		t.Fatalf("update in tx after a stale one: %d, %v", v, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, b, v := readAccount(t, db, 1); b != 100 || v != 0 {
		t.Fatal("rolled-back update is visible")
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if v, err := versioned.Update(ctx, conn, accounts, int64(1), int64(0), versioned.Set("balance", 2)); err != nil || v != 1 {
		t.Fatalf("update on *sql.Conn: %d, %v", v, err)
	}
	if err := versioned.Delete(ctx, conn, accounts, int64(1), int64(1)); err != nil {
		t.Fatal(err)
	}
}

func TestCompositeKeyAndSchema(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE SCHEMA billing;
		CREATE TABLE billing.lines (tenant text, n int, amount numeric NOT NULL, rev int NOT NULL DEFAULT 0,
			PRIMARY KEY (tenant, n));
		INSERT INTO billing.lines VALUES ('acme', 1, 10, 0), ('acme', 2, 20, 0), ('umbrella', 1, 30, 0)`)
	db := pg.SQL()
	ctx := ctxT(t)
	lines := versioned.MustTable("billing.lines", versioned.WithKey("tenant", "n"), versioned.WithVersionColumn("rev"))
	v, err := versioned.Update(ctx, db, lines, versioned.CompositeKey{"acme", 2}, int32(0), versioned.Set("amount", "25.50"))
	if err != nil || v != 1 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	if got := snapshot(t, db, "billing.lines"); got != "(acme,1,10,0) | (acme,2,25.50,1) | (umbrella,1,30,0)" {
		t.Fatalf("rows: %s", got)
	}
	_, err = versioned.Update(ctx, db, lines, versioned.CompositeKey{"acme", 2}, int32(0), versioned.Set("amount", 1))
	var se *versioned.StaleError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `key ("acme", 2)`) {
		t.Fatalf("stale composite: %v", err)
	}
}

// Invariant 8: identifiers are quoted (embedded quotes doubled), values are
// bound. Hostile names and values reach the server intact.
func TestHostileIdentifiersAndValues(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE "we""ird tab;le" ("id ""x" bigint PRIMARY KEY, "v; DROP TABLE x --" text,
		"ümlaut.col" int, "Ver""sion" bigint NOT NULL DEFAULT 0);
		INSERT INTO "we""ird tab;le" VALUES (1, 'a', 0, 0)`)
	db := pg.SQL()
	ctx := ctxT(t)
	tbl := versioned.MustTable(`we"ird tab;le`, versioned.WithKey(`id "x`), versioned.WithVersionColumn(`Ver"sion`), versioned.WithProbe())
	evil := `'); DELETE FROM "we""ird tab;le"; --`
	v, err := versioned.Update(ctx, db, tbl, int64(1), int64(0),
		versioned.Set(`v; DROP TABLE x --`, evil), versioned.Set("ümlaut.col", 7))
	if err != nil || v != 1 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	var got string
	var n int
	if err := db.QueryRow(`SELECT "v; DROP TABLE x --", "ümlaut.col" FROM "we""ird tab;le" WHERE "id ""x" = 1`).Scan(&got, &n); err != nil {
		t.Fatal(err)
	}
	if got != evil || n != 7 {
		t.Fatalf("stored %q %d", got, n)
	}
	if _, err := versioned.Update(ctx, db, tbl, int64(1), int64(0)); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	res, err := versioned.CompareAndSwap(ctx, db, tbl, int64(1),
		[]versioned.Pair{versioned.Eq(`v; DROP TABLE x --`, evil)}, versioned.Set("ümlaut.col", 8))
	if err != nil || res != versioned.Won {
		t.Fatalf("CAS = %v, %v", res, err)
	}
}

func TestKeyNotUnique(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE dup (code text NOT NULL, v int NOT NULL DEFAULT 0, note text);
		INSERT INTO dup VALUES ('a', 0, ''), ('a', 0, '')`)
	db := pg.SQL()
	ctx := ctxT(t)
	dup := versioned.MustTable("dup", versioned.WithKey("code"), versioned.WithVersionColumn("v"))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = versioned.Update(ctx, tx, dup, "a", 0, versioned.Set("note", "x"))
	var re *versioned.RowsError
	if !errors.Is(err, versioned.ErrKeyNotUnique) || !errors.As(err, &re) || re.Rows != 2 {
		t.Fatalf("non-unique key: %v", err)
	}
	res, err := versioned.CompareAndSwap(ctx, tx, dup, "a", []versioned.Pair{versioned.Eq("note", "x")}, versioned.Set("note", "y"))
	if !errors.Is(err, versioned.ErrKeyNotUnique) || res != 0 {
		t.Fatalf("non-unique CAS: %v %v", res, err)
	}
}

type account struct {
	ID      int64 `db:"id"`
	Owner   string
	Balance int64
	Version int64 `lock:"version"`
}

func TestStructHelpers(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	m, err := vmodel.Of(reflect.TypeOf(account{}))
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := versioned.NewTable("accounts", versioned.WithKey(m.KeyColumns()...),
		versioned.WithVersionColumn(m.Version.Column), versioned.WithProbe())
	if err != nil {
		t.Fatal(err)
	}
	a := account{ID: 2, Owner: "bob", Balance: 50, Version: 7}
	if err := versioned.UpdateStruct(ctx, db, accounts, &a, versioned.Set("balance", 60)); err != nil || a.Version != 8 {
		t.Fatalf("UpdateStruct: %v, version %d", err, a.Version)
	}
	old := account{ID: 2, Version: 7}
	if err := versioned.UpdateStruct(ctx, db, accounts, &old, versioned.Set("balance", 1)); !errors.Is(err, versioned.ErrStale) || old.Version != 7 {
		t.Fatalf("stale UpdateStruct: %v, version %d", err, old.Version)
	}
	if err := versioned.DeleteStruct(ctx, db, accounts, &old); !errors.Is(err, versioned.ErrStale) {
		t.Fatalf("stale DeleteStruct: %v", err)
	}
	if err := versioned.DeleteStruct(ctx, db, accounts, &a); err != nil {
		t.Fatal(err)
	}
}

// Overflow at the version type's maximum is an error, sent nowhere; the row
// is unchanged.
func TestOverflowChangesNothing(t *testing.T) {
	pg := pgtest.New(t)
	pg.Exec(`CREATE TABLE small (id int PRIMARY KEY, note text, version bigint NOT NULL);
		INSERT INTO small VALUES (1, 'i8', 127), (2, 'u8', 255), (3, 'i16', 32767), (4, 'u16', 65535),
			(5, 'i32', 2147483647), (6, 'i64', 9223372036854775807), (7, 'u64', 9223372036854775807)`)
	db := pg.SQL()
	ctx := ctxT(t)
	c := &counting{db: db}
	small := versioned.MustTable("small", versioned.WithProbe())
	before := snapshot(t, db, "small")
	check := func(name string, err error) {
		t.Helper()
		var oe *versioned.OverflowError
		if !errors.Is(err, versioned.ErrOverflow) || !errors.As(err, &oe) {
			t.Errorf("%s: %v, want ErrOverflow", name, err)
		}
	}
	_, err := versioned.Update(ctx, c, small, 1, int8(127), versioned.Set("note", "x"))
	check("int8", err)
	_, err = versioned.Update(ctx, c, small, 2, uint8(255), versioned.Set("note", "x"))
	check("uint8", err)
	_, err = versioned.Update(ctx, c, small, 3, int16(math.MaxInt16), versioned.Set("note", "x"))
	check("int16", err)
	_, err = versioned.Update(ctx, c, small, 4, uint16(math.MaxUint16), versioned.Set("note", "x"))
	check("uint16", err)
	_, err = versioned.Update(ctx, c, small, 5, int32(math.MaxInt32), versioned.Set("note", "x"))
	check("int32", err)
	_, err = versioned.Update(ctx, c, small, 6, int64(math.MaxInt64), versioned.Set("note", "x"))
	check("int64", err)
	_, err = versioned.Update(ctx, c, small, 7, uint64(math.MaxInt64), versioned.Set("note", "x"))
	check("uint64 at MaxInt64", err)
	_, err = versioned.Update(ctx, c, small, 7, uint64(math.MaxUint64), versioned.Set("note", "x"))
	check("uint64 above MaxInt64", err)
	check("delete uint64 above MaxInt64", versioned.Delete(ctx, c, small, 7, uint64(1<<63)))

	type tiny struct {
		ID      int  `db:"id"`
		Version int8 `lock:"version"`
	}
	check("struct int8", versioned.UpdateStruct(ctx, c, small, &tiny{ID: 1, Version: 127}, versioned.Set("note", "x")))
	type utiny struct {
		ID      int   `lock:"key"`
		Version uint8 `lock:"version"`
	}
	check("struct uint8", versioned.UpdateStruct(ctx, c, small, &utiny{ID: 2, Version: 255}, versioned.Set("note", "x")))

	if c.execs.Load() != 0 || c.queries.Load() != 0 {
		t.Fatalf("overflowing writes sent %d statements", c.execs.Load()+c.queries.Load())
	}
	if got := snapshot(t, db, "small"); got != before {
		t.Fatalf("rows changed:\n%s\n%s", before, got)
	}
	// One below the maximum still works and lands exactly on it.
	pg.Exec(`UPDATE small SET version = 126 WHERE id = 1`)
	if v, err := versioned.Update(ctx, db, small, 1, int8(126), versioned.Set("note", "y")); err != nil || v != 127 {
		t.Fatalf("int8 126 → %d, %v", v, err)
	}
}

// Invariants 2 and 9: every bad input gets its typed error, sends nothing
// and changes no row.
func TestBadInputChangesNothing(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	c := &counting{db: db}
	accounts := versioned.MustTable("accounts")
	before := snapshot(t, db, "accounts")
	var nilDB *sql.DB
	var nilTx *sql.Tx
	var nilConn *sql.Conn
	var nilID *int64
	type wrongShape struct {
		ID      int64
		Version string `lock:"version"`
	}
	type twoVersions struct {
		ID int64
		A  int64 `lock:"version"`
		B  int64 `lock:"version"`
	}
	type nullable struct {
		ID      int64
		Version *int64 `lock:"version"`
	}
	type noKey struct {
		Version int64 `lock:"version"`
	}

	cases := []struct {
		name string
		want error
		as   any
		call func() error
	}{
		{"nil handle", sqlock.ErrNilHandle, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, nil, accounts, int64(1), int64(0), versioned.Set("balance", 0))
			return err
		}},
		{"nil *sql.DB", sqlock.ErrNilHandle, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, nilDB, accounts, int64(1), int64(0), versioned.Set("balance", 0))
			return err
		}},
		{"nil *sql.Tx delete", sqlock.ErrNilHandle, new(*versioned.InputError), func() error {
			return versioned.Delete(ctx, nilTx, accounts, int64(1), int64(0))
		}},
		{"nil *sql.Conn CAS", sqlock.ErrNilHandle, new(*versioned.InputError), func() error {
			_, err := versioned.CompareAndSwap(ctx, nilConn, accounts, int64(1), []versioned.Pair{versioned.Eq("owner", "ann")}, versioned.Set("owner", "x"))
			return err
		}},
		{"nil table", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, c, nil, int64(1), int64(0), versioned.Set("balance", 0))
			return err
		}},
		{"nil key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			_, err := versioned.Update(ctx, c, accounts, nil, int64(0), versioned.Set("balance", 0))
			return err
		}},
		{"zero key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			_, err := versioned.Update(ctx, c, accounts, 0, int64(0), versioned.Set("balance", 0))
			return err
		}},
		{"empty string key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.Delete(ctx, c, accounts, "", int64(0))
		}},
		{"nil pointer key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.Delete(ctx, c, accounts, nilID, int64(0))
		}},
		{"NULL Valuer key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.Delete(ctx, c, accounts, sql.NullInt64{}, int64(0))
		}},
		{"composite key for one column", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.Delete(ctx, c, accounts, versioned.CompositeKey{1, 2}, int64(0))
		}},
		{"CAS nil key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			_, err := versioned.CompareAndSwap(ctx, c, accounts, nil, []versioned.Pair{versioned.Eq("owner", "ann")}, versioned.Set("owner", "x"))
			return err
		}},
		{"set version column", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("version", 99))
			return err
		}},
		{"set column twice", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("balance", 1), versioned.Set("balance", 2))
			return err
		}},
		{"empty set column", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("", 1))
			return err
		}},
		{"NUL in column", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.Update(ctx, c, accounts, int64(1), int64(0), versioned.Set("bal\x00ance", 1))
			return err
		}},
		{"CAS without compare", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.CompareAndSwap(ctx, c, accounts, int64(1), nil, versioned.Set("owner", "x"))
			return err
		}},
		{"CAS without swap", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.CompareAndSwap(ctx, c, accounts, int64(1), []versioned.Pair{versioned.Eq("owner", "ann")})
			return err
		}},
		{"CAS empty column", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			_, err := versioned.CompareAndSwap(ctx, c, accounts, int64(1), []versioned.Pair{versioned.Eq("", "ann")}, versioned.Set("owner", "x"))
			return err
		}},
		{"struct: string version", versioned.ErrInvalidModel, new(*versioned.TagError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, &wrongShape{ID: 1}, versioned.Set("balance", 1))
		}},
		{"struct: two versions", versioned.ErrInvalidModel, new(*versioned.TagError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, &twoVersions{ID: 1}, versioned.Set("balance", 1))
		}},
		{"struct: *int64 version", versioned.ErrInvalidModel, new(*versioned.TagError), func() error {
			return versioned.DeleteStruct(ctx, c, accounts, &nullable{ID: 1})
		}},
		{"struct: no version", versioned.ErrInvalidModel, new(*versioned.TagError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, &struct{ ID int64 }{ID: 1})
		}},
		{"struct: no key field", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, &noKey{}, versioned.Set("balance", 1))
		}},
		{"struct: zero key", versioned.ErrNoKey, new(*versioned.KeyError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, &account{}, versioned.Set("balance", 1))
		}},
		{"struct: not a pointer", versioned.ErrInvalidArg, new(*versioned.InputError), func() error {
			return versioned.UpdateStruct(ctx, c, accounts, account{ID: 1}, versioned.Set("balance", 1))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !errors.As(err, tc.as) {
				t.Fatalf("err %T is not %T", err, tc.as)
			}
			if errors.Is(err, versioned.ErrStale) {
				t.Fatal("bad input reported as stale")
			}
		})
	}
	if n := c.execs.Load() + c.queries.Load(); n != 0 {
		t.Fatalf("bad input sent %d statements", n)
	}
	if got := snapshot(t, db, "accounts"); got != before {
		t.Fatalf("rows changed:\n%s\n%s", before, got)
	}

	for _, bad := range []struct {
		name string
		opts []versioned.Option
		want error
	}{
		{"", nil, versioned.ErrInvalidArg},
		{"a..b", nil, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithKey()}, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithKey("")}, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithKey("id", "id")}, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithKey("version")}, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithVersionColumn("")}, versioned.ErrInvalidArg},
		{"accounts", []versioned.Option{versioned.WithDialect(versioned.Dialect(42))}, versioned.ErrInvalidArg},
	} {
		if tb, err := versioned.NewTable(bad.name, bad.opts...); !errors.Is(err, bad.want) || tb != nil {
			t.Errorf("NewTable(%q, %d opts) = %v, %v; want %v", bad.name, len(bad.opts), tb, err, bad.want)
		}
	}
}

func TestZeroKeyOptIn(t *testing.T) {
	db := accountsDB(t)
	ctx := ctxT(t)
	if _, err := db.Exec(`INSERT INTO accounts VALUES (0, 'root', 1, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := versioned.Update(ctx, db, versioned.MustTable("accounts"), 0, 0, versioned.Set("balance", 2)); !errors.Is(err, versioned.ErrNoKey) {
		t.Fatalf("zero key without WithZeroKey: %v", err)
	}
	if v, err := versioned.Update(ctx, db, versioned.MustTable("accounts", versioned.WithZeroKey()), 0, 0, versioned.Set("balance", 2)); err != nil || v != 1 {
		t.Fatalf("zero key with WithZeroKey: %d, %v", v, err)
	}
	// nil stays missing even then.
	if err := versioned.Delete(ctx, db, versioned.MustTable("accounts", versioned.WithZeroKey()), nil, 1); !errors.Is(err, versioned.ErrNoKey) {
		t.Fatalf("nil key with WithZeroKey: %v", err)
	}
}

// A cancelled context is the driver's error, not a conflict, and writes
// nothing; retry.Do does not retry it.
func TestCancelledContext(t *testing.T) {
	db := accountsDB(t)
	before := snapshot(t, db, "accounts")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	accounts := versioned.MustTable("accounts", versioned.WithProbe())
	calls := 0
	err := retry.Do(ctx, func(ctx context.Context) error {
		calls++
		_, err := versioned.Update(ctx, db, accounts, int64(1), int64(0), versioned.Set("balance", 0))
		return err
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, versioned.ErrStale) || calls != 1 {
		t.Fatalf("cancelled: %v after %d calls", err, calls)
	}
	if snapshot(t, db, "accounts") != before {
		t.Fatal("a cancelled write changed rows")
	}
}
