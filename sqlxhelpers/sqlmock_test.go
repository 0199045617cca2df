package sqlxhelpers_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"github.com/sqlock/sqlock"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock/sqlxhelpers"
	"github.com/sqlock/sqlock/versioned"
)

// mockDB returns a sqlx handle on go-sqlmock that matches statements by
// exact text, under driverName (which decides the bind style).
func mockDB(t testing.TB, driverName string) (*sqlx.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
		db.Close()
	})
	return sqlx.NewDb(db, driverName), mock
}

// Line has a composite key and renamed columns.
type Line struct {
	Invoice int64     `db:"invoice_id" lock:"key"`
	No      int32     `lock:"key,column=line_no"`
	Amount  int64     `db:"amount"`
	Note    *string   `db:"note"`
	At      time.Time `db:"at"`
	Rev     int8      `db:"rev" lock:"version"`
	Ignored string    `db:"-"`
}

// Audit is embedded: its fields are columns of the embedding struct.
type Audit struct {
	By string `db:"by"`
}

type Doc struct {
	ID    string `db:"id"`
	Title string `db:"title"`
	Audit
	Version uint32 `db:"version" lock:"version"`
}

func TestGoldenStructSQL(t *testing.T) {
	ctx := context.Background()
	db, mock := mockDB(t, "postgres")
	h := newHelper(t, db)

	a := Account{ID: 7, Owner: "ann", Balance: 150, Version: 3}
	mock.ExpectExec(`UPDATE "accounts" SET "owner" = $1, "balance" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`).
		WithArgs("ann", int64(150), int64(7), int64(3)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.Update(ctx, "accounts", &a); err != nil {
		t.Fatal(err)
	}
	if a.Version != 4 {
		t.Errorf("version %d", a.Version)
	}

	// Stale: 0 rows. The struct keeps its version.
	mock.ExpectExec(`UPDATE "accounts" SET "balance" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`).
		WithArgs(int64(150), int64(7), int64(4)).WillReturnResult(sqlmock.NewResult(0, 0))
	err := h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("balance"))
	var se *versioned.StaleError
	if !errors.As(err, &se) || se.Expected != 4 || se.Key != int64(7) || se.Op != "update" {
		t.Fatalf("stale: %v", err)
	}
	if a.Version != 4 {
		t.Errorf("stale update changed the version to %d", a.Version)
	}

	// Two rows: the key is not unique.
	mock.ExpectExec(`UPDATE "accounts" SET "version" = "version" + 1 WHERE "id" = $1 AND "version" = $2`).
		WithArgs(int64(7), int64(4)).WillReturnResult(sqlmock.NewResult(0, 2))
	if err := h.Update(ctx, "accounts", &a, sqlxhelpers.Columns()); !errors.Is(err, versioned.ErrKeyNotUnique) {
		t.Fatalf("two rows: %v", err)
	}

	mock.ExpectExec(`DELETE FROM "accounts" WHERE "id" = $1 AND "version" = $2`).
		WithArgs(int64(7), int64(4)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.Delete(ctx, "accounts", &a); err != nil {
		t.Fatal(err)
	}

	// Composite key, column= and db tags, a schema-qualified table, a nil
	// pointer as NULL, an int8 version.
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := Line{Invoice: 9, No: 2, Amount: 500, At: at, Rev: 5}
	mock.ExpectExec(`UPDATE "billing"."lines" SET "amount" = $1, "note" = $2, "at" = $3, "rev" = "rev" + 1 WHERE "invoice_id" = $4 AND "line_no" = $5 AND "rev" = $6`).
		WithArgs(int64(500), nil, at, int64(9), int32(2), int64(5)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.Update(ctx, "billing.lines", &l); err != nil {
		t.Fatal(err)
	}
	mock.ExpectExec(`DELETE FROM "billing"."lines" WHERE "invoice_id" = $1 AND "line_no" = $2 AND "rev" = $3`).
		WithArgs(int64(9), int32(2), int64(6)).WillReturnResult(sqlmock.NewResult(0, 0))
	if err := h.Delete(ctx, "billing.lines", &l); !errors.As(err, &se) || se.Key.(versioned.CompositeKey)[1] != int32(2) {
		t.Fatalf("composite stale delete: %v", err)
	}

	// Embedded struct fields, a string key, an unsigned version.
	d := Doc{ID: "d1", Title: "T", Audit: Audit{By: "me"}, Version: 1}
	mock.ExpectExec(`UPDATE "docs" SET "title" = $1, "by" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`).
		WithArgs("T", "me", "d1", int64(1)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.Update(ctx, "docs", &d); err != nil || d.Version != 2 {
		t.Fatalf("doc: %v, version %d", err, d.Version)
	}

	// UpdateSQL/DeleteSQL show the same statements without running them.
	if s, err := h.UpdateSQL("accounts", Account{}, sqlxhelpers.Columns("owner")); err != nil ||
		s != `UPDATE "accounts" SET "owner" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3` {
		t.Errorf("UpdateSQL: %s %v", s, err)
	}
	if s, err := h.DeleteSQL(`we"ird`, &Account{}); err != nil || s != `DELETE FROM "we""ird" WHERE "id" = $1 AND "version" = $2` {
		t.Errorf("DeleteSQL: %s %v", s, err)
	}
}

func TestGoldenBindStyles(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		driver, update, named string
	}{
		{"mysql",
			"UPDATE `accounts` SET `owner` = ?, `balance` = ?, `version` = `version` + 1 WHERE `id` = ? AND `version` = ?",
			""},
		{"sqlite3",
			`UPDATE "accounts" SET "owner" = ?, "balance" = ?, "version" = "version" + 1 WHERE "id" = ? AND "version" = ?`,
			`UPDATE accounts SET balance = ?, "version" = "version" + 1 WHERE (id = ?) AND "version" = ?`},
		{"sqlserver",
			`UPDATE "accounts" SET "owner" = @p1, "balance" = @p2, "version" = "version" + 1 WHERE "id" = @p3 AND "version" = @p4`,
			`UPDATE accounts SET balance = @p1, "version" = "version" + 1 WHERE (id = @p2) AND "version" = @p3`},
	} {
		t.Run(c.driver, func(t *testing.T) {
			db, mock := mockDB(t, c.driver)
			h := newHelper(t, db)
			a := Account{ID: 1, Owner: "o", Balance: 2, Version: 0}
			mock.ExpectExec(c.update).WithArgs("o", int64(2), int64(1), int64(0)).WillReturnResult(sqlmock.NewResult(0, 1))
			if err := h.Update(ctx, "accounts", &a); err != nil {
				t.Fatal(err)
			}
			if c.named == "" {
				return
			}
			mock.ExpectExec(c.named).WithArgs(int64(2), int64(1), int64(1)).WillReturnResult(sqlmock.NewResult(0, 1))
			if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :balance WHERE id = :id`, &a); err != nil {
				t.Fatal(err)
			}
			if a.Version != 2 {
				t.Errorf("version %d", a.Version)
			}
		})
	}
}

func TestGoldenNamedExec(t *testing.T) {
	ctx := context.Background()
	db, mock := mockDB(t, "pgx")
	h := newHelper(t, db)
	a := Account{ID: 7, Owner: "ann", Balance: 150, Version: 3}

	const q = `UPDATE accounts AS a SET balance = a.balance + :balance
	  FROM owners o
	 WHERE o.name = :owner AND o.id = a.owner_id OR a.id = :id -- pay
	RETURNING a.balance;`
	const want = `UPDATE accounts AS a SET balance = a.balance + $1, "version" = a."version" + 1
	  FROM owners o
	 WHERE (o.name = $2 AND o.id = a.owner_id OR a.id = $3) AND a."version" = $4 -- pay
	RETURNING a.balance`
	mock.ExpectExec(want).WithArgs(int64(150), "ann", int64(7), int64(3)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.NamedExec(ctx, q, &a); err != nil {
		t.Fatal(err)
	}
	if a.Version != 4 {
		t.Errorf("version %d", a.Version)
	}
	mock.ExpectExec(`DELETE FROM accounts WHERE (id = $1 AND owner = 'it''s :owner') AND "version" = $2`).
		WithArgs(int64(7), int64(4)).WillReturnResult(sqlmock.NewResult(0, 0))
	err := h.NamedExec(ctx, `DELETE FROM accounts WHERE id = :id AND owner = 'it''s :owner'`, &a)
	var se *versioned.StaleError
	if !errors.As(err, &se) || se.Op != "delete" || se.Table != "accounts" || se.Expected != 4 || se.Key != int64(7) {
		t.Fatalf("stale delete: %v", err)
	}
	// A driver error is returned wrapped, the struct unchanged.
	boom := errors.New("boom")
	mock.ExpectExec(`UPDATE accounts SET owner = $1, "version" = "version" + 1 WHERE (id = $2) AND "version" = $3`).
		WillReturnError(boom)
	if err := h.NamedExec(ctx, `UPDATE accounts SET owner = :owner WHERE id = :id`, &a); !errors.Is(err, boom) || a.Version != 4 {
		t.Fatalf("driver error: %v, version %d", err, a.Version)
	}
}

type NoKey struct {
	Name    string `db:"name"`
	Version int64  `db:"version" lock:"version"`
}

type NoVersion struct {
	ID int64 `db:"id"`
}

type TinyVersion struct {
	ID      int64 `db:"id"`
	Version int8  `db:"version" lock:"version"`
}

// Refusals are typed and send nothing: the mock has no expectations, so any
// statement would fail the test.
func TestRefusalsSendNothing(t *testing.T) {
	ctx := context.Background()
	db, _ := mockDB(t, "postgres")
	h := newHelper(t, db)
	a := Account{ID: 1, Version: 0}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"no key field", h.Update(ctx, "t", &NoKey{Name: "x"}), versioned.ErrNoKey},
		{"no key field, delete", h.Delete(ctx, "t", &NoKey{Name: "x"}), versioned.ErrNoKey},
		{"zero key", h.Update(ctx, "accounts", &Account{}), versioned.ErrNoKey},
		{"zero composite key part", h.Delete(ctx, "lines", &Line{Invoice: 1}), versioned.ErrNoKey},
		{"no version field", h.Update(ctx, "t", &NoVersion{ID: 1}), versioned.ErrInvalidModel},
		{"overflow", h.Update(ctx, "t", &TinyVersion{ID: 1, Version: 127}), versioned.ErrOverflow},
		{"named overflow", h.NamedExec(ctx, `UPDATE t SET id = :id WHERE id = :id`, &TinyVersion{ID: 1, Version: 127}), versioned.ErrOverflow},
		{"version in Columns", h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("version")), versioned.ErrInvalidArg},
		{"unknown column", h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("nope")), versioned.ErrInvalidArg},
		{"column twice", h.Update(ctx, "accounts", &a, sqlxhelpers.Columns("owner", "owner")), versioned.ErrInvalidArg},
		{"empty table", h.Update(ctx, "", &Account{ID: 1}), versioned.ErrInvalidArg},
		{"not a pointer", h.Update(ctx, "accounts", a), versioned.ErrInvalidArg},
		{"nil pointer", h.Delete(ctx, "accounts", (*Account)(nil)), versioned.ErrInvalidArg},
		{"nil handle", h.On(nil).Update(ctx, "accounts", &a), sqlock.ErrNilHandle},
		{"nil *sqlx.Tx", h.On((*sqlx.Tx)(nil)).NamedExec(ctx, `DELETE FROM t WHERE id = :id`, &a), sqlock.ErrNilHandle},
		{"no WHERE", h.NamedExec(ctx, `UPDATE accounts SET balance = :balance`, &a), sqlxhelpers.ErrRewrite},
		{"version assigned", h.NamedExec(ctx, `UPDATE accounts SET version = :version WHERE id = :id`, &a), sqlxhelpers.ErrRewrite},
		{"unknown parameter", h.NamedExec(ctx, `UPDATE accounts SET balance = :nope WHERE id = :id`, &a), sqlxhelpers.ErrBind},
		{"named not a pointer", h.NamedExec(ctx, `DELETE FROM t WHERE id = :id`, a), versioned.ErrInvalidArg},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if k := sqlxhelpers.KindOf(h.NamedExec(ctx, `UPDATE accounts SET balance = :balance`, &a)); k != "no-where" {
		t.Errorf("no WHERE: kind %q", k)
	}
	if k := sqlxhelpers.KindOf(h.NamedExec(ctx, `UPDATE accounts SET version = :version WHERE id = :id`, &a)); k != "version-assigned" {
		t.Errorf("version assigned: kind %q", k)
	}
	if _, err := sqlxhelpers.New(nil); !errors.Is(err, sqlock.ErrNilHandle) {
		t.Errorf("New(nil): %v", err)
	}
	var be *sqlxhelpers.BindError
	if err := h.NamedExec(ctx, `UPDATE accounts SET balance = :nope WHERE id = :id`, &a); !errors.As(err, &be) || be.Param != "nope" {
		t.Errorf("BindError: %v", err)
	}
	if _, err := h.Rewrite(`DELETE FROM t WHERE id = :id`, 42); !errors.Is(err, sqlxhelpers.ErrBind) {
		t.Errorf("Rewrite with a non-struct: %v", err)
	}
}

func TestRewriteCache(t *testing.T) {
	db, _ := mockDB(t, "postgres")
	const q = `UPDATE accounts SET balance = :balance WHERE id = :id`
	h := newHelper(t, db)
	g1, err := h.Rewrite(q, Account{})
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := h.Rewrite(q, &Account{})
	if g1 != g2 {
		t.Error("the same query and type were rewritten twice")
	}
	// A different type (another version column) is another entry.
	type Other struct {
		ID  int64 `db:"id"`
		Rev int64 `db:"rev" lock:"version"`
	}
	g3, err := h.Rewrite(`UPDATE accounts SET id = :id WHERE id = :id`, Other{})
	if err != nil || g3.Named != `UPDATE accounts SET id = :id, "rev" = "rev" + 1 WHERE (id = :id) AND "rev" = :rev` {
		t.Errorf("other type: %v %v", g3, err)
	}
	// A helper that keeps nothing builds every time; so does a full one.
	for _, size := range []int{0, 1} {
		h0 := newHelper(t, db, sqlxhelpers.WithCacheSize(size))
		if size == 1 {
			h0.Rewrite(`DELETE FROM x WHERE true`, Account{}) // fills the only slot
		}
		a, _ := h0.Rewrite(q, Account{})
		b, _ := h0.Rewrite(q, Account{})
		if a == b || a.SQL != b.SQL {
			t.Errorf("cache size %d: cached past its bound", size)
		}
	}
	// Refusals are cached too, and still typed.
	for range 2 {
		if _, err := h.Rewrite(`DELETE FROM t`, Account{}); sqlxhelpers.KindOf(err) != "no-where" {
			t.Errorf("cached refusal: %v", err)
		}
	}
}

// valuer is a driver.Valuer struct: bound as one value.
type money struct{ cents int64 }

func (m money) Value() (driver.Value, error) { return m.cents, nil }

type Priced struct {
	ID      int64 `db:"id"`
	Price   money `db:"price"`
	Version int64 `db:"version" lock:"version"`
	Addr    struct {
		Street string `db:"street"`
	} `db:"addr"` // a nested struct whose fields are mapped: not a column by default
}

func TestValuerColumnsAndNested(t *testing.T) {
	db, mock := mockDB(t, "postgres")
	h := newHelper(t, db)
	p := Priced{ID: 1, Price: money{250}, Version: 2}
	mock.ExpectExec(`UPDATE "items" SET "price" = $1, "version" = "version" + 1 WHERE "id" = $2 AND "version" = $3`).
		WithArgs(int64(250), int64(1), int64(2)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.Update(context.Background(), "items", &p); err != nil {
		t.Fatal(err)
	}
	// A nested field can be bound by its sqlx path in a named statement.
	p.Addr.Street = "Main"
	mock.ExpectExec(`UPDATE items SET street = $1, "version" = "version" + 1 WHERE (id = $2) AND "version" = $3`).
		WithArgs("Main", int64(1), int64(3)).WillReturnResult(sqlmock.NewResult(0, 1))
	if err := h.NamedExec(context.Background(), `UPDATE items SET street = :addr.street WHERE id = :id`, &p); err != nil {
		t.Fatal(err)
	}
}
