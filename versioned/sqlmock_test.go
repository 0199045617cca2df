package versioned_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/sqlock/sqlock/versioned"
)

// mockDB returns a database whose expectations match SQL text exactly.
func mockDB(t *testing.T) (*sql.DB, sqlmock.Sqlmock) {
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
	return db, mock
}

func args(vs ...any) []driver.Value {
	out := make([]driver.Value, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// The exact statements, per dialect. Identifiers are quoted; every value is
// a placeholder.
func TestSQLTextPerDialect(t *testing.T) {
	type want struct {
		update, delete, probe, cas, exists string
	}
	cases := map[versioned.Dialect]want{
		versioned.Postgres: {
			update: `UPDATE "accounts" SET "balance" = $1, "owner" = $2, "version" = "version" + 1 WHERE "id" = $3 AND "version" = $4`,
			delete: `DELETE FROM "accounts" WHERE "id" = $1 AND "version" = $2`,
			probe:  `SELECT "version" FROM "accounts" WHERE "id" = $1`,
			cas: `WITH "sqlock_cas" AS (UPDATE "accounts" SET "owner" = $1, "balance" = $2 WHERE "id" = $3 AND "owner" = $4 AND "closed_at" IS NULL RETURNING 1) ` +
				`SELECT (SELECT count(*) FROM "sqlock_cas"), EXISTS (SELECT 1 FROM "accounts" WHERE "id" = $3)`,
		},
		versioned.MySQL: {
			update: "UPDATE `accounts` SET `balance` = ?, `owner` = ?, `version` = `version` + 1 WHERE `id` = ? AND `version` = ?",
			delete: "DELETE FROM `accounts` WHERE `id` = ? AND `version` = ?",
			probe:  "SELECT `version` FROM `accounts` WHERE `id` = ? FOR UPDATE",
			cas:    "UPDATE `accounts` SET `owner` = ?, `balance` = ? WHERE `id` = ? AND `owner` = ? AND `closed_at` IS NULL",
			// A locking read of the newest row that also tells a swap to
			// the values the row holds (unaffected on a default DSN).
			exists: "SELECT (`owner` = ? AND `closed_at` IS NULL AND `owner` <=> ? AND `balance` <=> ?) FROM `accounts` WHERE `id` = ? FOR UPDATE",
		},
		versioned.SQLite: {
			update: `UPDATE "accounts" SET "balance" = ?, "owner" = ?, "version" = "version" + 1 WHERE "id" = ? AND "version" = ?`,
			delete: `DELETE FROM "accounts" WHERE "id" = ? AND "version" = ?`,
			probe:  `SELECT "version" FROM "accounts" WHERE "id" = ?`,
			cas:    `UPDATE "accounts" SET "owner" = ?, "balance" = ? WHERE "id" = ? AND "owner" = ? AND "closed_at" IS NULL`,
			exists: `SELECT 1 FROM "accounts" WHERE "id" = ?`,
		},
	}
	ctx := context.Background()
	for d, w := range cases {
		t.Run(d.String(), func(t *testing.T) {
			db, mock := mockDB(t)
			tbl := versioned.MustTable("accounts", versioned.WithDialect(d), versioned.WithProbe())
			if got, _ := tbl.UpdateSQL("balance", "owner"); got != w.update {
				t.Errorf("UpdateSQL:\n got %s\nwant %s", got, w.update)
			}
			if tbl.DeleteSQL() != w.delete || tbl.ProbeSQL() != w.probe {
				t.Errorf("DeleteSQL %s\nProbeSQL %s", tbl.DeleteSQL(), tbl.ProbeSQL())
			}

			// Success: one statement, no probe, new version = expected + 1.
			mock.ExpectExec(w.update).WithArgs(args(int64(10), "ann", int64(1), int64(4))...).
				WillReturnResult(sqlmock.NewResult(0, 1))
			v, err := versioned.Update(ctx, db, tbl, int64(1), int64(4), versioned.Set("balance", int64(10)), versioned.Set("owner", "ann"))
			if err != nil || v != 5 {
				t.Fatalf("Update = %d, %v", v, err)
			}
			// Conflict: the statement, then exactly one probe.
			mock.ExpectExec(w.update).WithArgs(args(int64(10), "ann", int64(1), int64(4))...).
				WillReturnResult(sqlmock.NewResult(0, 0))
			mock.ExpectQuery(w.probe).WithArgs(int64(1)).
				WillReturnRows(sqlmock.NewRows([]string{"version"}).AddRow(int64(6)))
			_, err = versioned.Update(ctx, db, tbl, int64(1), int64(4), versioned.Set("balance", int64(10)), versioned.Set("owner", "ann"))
			var se *versioned.StaleError
			if !errors.As(err, &se) || !rowChanged(se) || se.Current != 6 {
				t.Fatalf("stale Update: %v", err)
			}

			mock.ExpectExec(w.delete).WithArgs(int64(1), int64(5)).WillReturnResult(sqlmock.NewResult(0, 1))
			if err := versioned.Delete(ctx, db, tbl, int64(1), int64(5)); err != nil {
				t.Fatal(err)
			}
			mock.ExpectExec(w.delete).WithArgs(int64(1), int64(5)).WillReturnResult(sqlmock.NewResult(0, 0))
			mock.ExpectQuery(w.probe).WithArgs(int64(1)).WillReturnRows(sqlmock.NewRows([]string{"version"}))
			if err := versioned.Delete(ctx, db, tbl, int64(1), int64(5)); !errors.As(err, &se) || !se.Gone {
				t.Fatalf("stale Delete: %v", err)
			}

			// Compare-and-swap: one statement on Postgres; two steps elsewhere.
			expect := []versioned.Pair{versioned.Eq("owner", "ann"), versioned.Eq("closed_at", nil)}
			set := []versioned.Pair{versioned.Set("owner", "bob"), versioned.Set("balance", int64(0))}
			existsArgs := args(int64(1))
			if d == versioned.MySQL {
				existsArgs = args("ann", "bob", int64(0), int64(1))
			}
			if d == versioned.Postgres {
				mock.ExpectQuery(w.cas).WithArgs("bob", int64(0), int64(1), "ann").
					WillReturnRows(sqlmock.NewRows([]string{"count", "exists"}).AddRow(int64(0), true))
			} else {
				mock.ExpectExec(w.cas).WithArgs("bob", int64(0), int64(1), "ann").WillReturnResult(sqlmock.NewResult(0, 0))
				mock.ExpectQuery(w.exists).WithArgs(existsArgs...).WillReturnRows(sqlmock.NewRows([]string{"one"}).AddRow(0))
			}
			if r, err := versioned.CompareAndSwap(ctx, db, tbl, int64(1), expect, set...); err != nil || r != versioned.Lost {
				t.Fatalf("CAS = %v, %v", r, err)
			}
			if d == versioned.Postgres {
				mock.ExpectQuery(w.cas).WithArgs("bob", int64(0), int64(1), "ann").
					WillReturnRows(sqlmock.NewRows([]string{"count", "exists"}).AddRow(int64(0), false))
			} else {
				mock.ExpectExec(w.cas).WithArgs("bob", int64(0), int64(1), "ann").WillReturnResult(sqlmock.NewResult(0, 0))
				mock.ExpectQuery(w.exists).WithArgs(existsArgs...).WillReturnRows(sqlmock.NewRows([]string{"one"}))
			}
			if r, err := versioned.CompareAndSwap(ctx, db, tbl, int64(1), expect, set...); err != nil || r != versioned.Missing {
				t.Fatalf("CAS = %v, %v", r, err)
			}
			if d == versioned.Postgres {
				mock.ExpectQuery(w.cas).WithArgs("bob", int64(0), int64(1), "ann").
					WillReturnRows(sqlmock.NewRows([]string{"count", "exists"}).AddRow(int64(1), true))
			} else {
				mock.ExpectExec(w.cas).WithArgs("bob", int64(0), int64(1), "ann").WillReturnResult(sqlmock.NewResult(0, 1))
			}
			if r, err := versioned.CompareAndSwap(ctx, db, tbl, int64(1), expect, set...); err != nil || r != versioned.Won {
				t.Fatalf("CAS = %v, %v", r, err)
			}
		})
	}
}

func TestSQLTextQualifiedCompositeQuoted(t *testing.T) {
	for d, want := range map[versioned.Dialect]string{
		versioned.Postgres: `UPDATE "billing"."in""voices" SET "a""b" = $1, "rev" = "rev" + 1 WHERE "tenant" = $2 AND "n" = $3 AND "rev" = $4`,
		versioned.MySQL:    "UPDATE `billing`.`in\"voices` SET `a\"b` = ?, `rev` = `rev` + 1 WHERE `tenant` = ? AND `n` = ? AND `rev` = ?",
		versioned.SQLite:   `UPDATE "billing"."in""voices" SET "a""b" = ?, "rev" = "rev" + 1 WHERE "tenant" = ? AND "n" = ? AND "rev" = ?`,
	} {
		tbl := versioned.MustTable(`billing.in"voices`, versioned.WithDialect(d), versioned.WithKey("tenant", "n"), versioned.WithVersionColumn("rev"))
		if got, err := tbl.UpdateSQL(`a"b`); err != nil || got != want {
			t.Errorf("%s:\n got %s\nwant %s (%v)", d, got, want, err)
		}
	}
	tbl := versioned.MustTable("t", versioned.WithDialect(versioned.MySQL))
	if got, _ := tbl.UpdateSQL("we`ird"); got != "UPDATE `t` SET `we``ird` = ?, `version` = `version` + 1 WHERE `id` = ? AND `version` = ?" {
		t.Errorf("backquote escaping: %s", got)
	}
	// A table called sqlock_cas does not collide with the CTE's name.
	db, mock := mockDB(t)
	cas := versioned.MustTable("sqlock_cas")
	mock.ExpectQuery(`WITH "sqlock_cas_" AS (UPDATE "sqlock_cas" SET "s" = $1 WHERE "id" = $2 AND "s" = $3 RETURNING 1) `+
		`SELECT (SELECT count(*) FROM "sqlock_cas_"), EXISTS (SELECT 1 FROM "sqlock_cas" WHERE "id" = $2)`).
		WithArgs("b", int64(3), "a").WillReturnRows(sqlmock.NewRows([]string{"c", "e"}).AddRow(int64(1), true))
	if r, err := versioned.CompareAndSwap(context.Background(), db, cas, int64(3),
		[]versioned.Pair{versioned.Eq("s", "a")}, versioned.Set("s", "b")); r != versioned.Won || err != nil {
		t.Fatalf("CAS = %v, %v", r, err)
	}
}

// Without WithProbe a conflict costs nothing beyond the statement itself.
func TestNoProbeByDefault(t *testing.T) {
	db, mock := mockDB(t)
	tbl := versioned.MustTable("accounts")
	mock.ExpectExec(`UPDATE "accounts" SET "version" = "version" + 1 WHERE "id" = $1 AND "version" = $2`).
		WithArgs(int64(1), int64(2)).WillReturnResult(sqlmock.NewResult(0, 0))
	_, err := versioned.Update(context.Background(), db, tbl, int64(1), int64(2))
	var se *versioned.StaleError
	if !errors.As(err, &se) || se.Probed {
		t.Fatalf("stale: %v", err)
	}
}

// A failing probe leaves the conflict reported, with the probe's error.
func TestProbeFailureStillStale(t *testing.T) {
	db, mock := mockDB(t)
	tbl := versioned.MustTable("accounts", versioned.WithProbe())
	mock.ExpectExec(`DELETE FROM "accounts" WHERE "id" = $1 AND "version" = $2`).
		WithArgs("k", int64(2)).WillReturnResult(sqlmock.NewResult(0, 0))
	boom := errors.New("connection reset")
	mock.ExpectQuery(`SELECT "version" FROM "accounts" WHERE "id" = $1`).WithArgs("k").WillReturnError(boom)
	err := versioned.Delete(context.Background(), db, tbl, "k", int64(2))
	var se *versioned.StaleError
	if !errors.As(err, &se) || se.Probed || !errors.Is(se.ProbeErr, boom) {
		t.Fatalf("stale with failed probe: %v", err)
	}
	if errors.Is(err, boom) {
		t.Fatal("the probe's error must not masquerade as the write's")
	}
}

// Statement and RowsAffected errors are returned wrapped, never as stale.
func TestDriverErrorsPassThrough(t *testing.T) {
	db, mock := mockDB(t)
	tbl := versioned.MustTable("accounts", versioned.WithDialect(versioned.SQLite))
	boom := errors.New("disk I/O error")
	mock.ExpectExec(`DELETE FROM "accounts" WHERE "id" = ? AND "version" = ?`).WillReturnError(boom)
	if err := versioned.Delete(context.Background(), db, tbl, 1, 1); !errors.Is(err, boom) || errors.Is(err, versioned.ErrStale) {
		t.Fatalf("exec error: %v", err)
	}
	mock.ExpectExec(`DELETE FROM "accounts" WHERE "id" = ? AND "version" = ?`).WillReturnResult(sqlmock.NewErrorResult(boom))
	if err := versioned.Delete(context.Background(), db, tbl, 1, 1); !errors.Is(err, boom) || errors.Is(err, versioned.ErrStale) {
		t.Fatalf("rows affected error: %v", err)
	}
}

// capture records the statements it is given.
type capture struct {
	mu   sync.Mutex
	sqls []string
}

func (c *capture) ExecContext(_ context.Context, q string, _ ...any) (sql.Result, error) {
	c.mu.Lock()
	c.sqls = append(c.sqls, q)
	c.mu.Unlock()
	return sqlmock.NewResult(0, 1), nil
}

// QueryRowContext is never called: the cache test's table does not probe.
func (c *capture) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// The per-table statement cache never serves one column list's statement
// for another, under concurrent use and beyond its capacity.
func TestUpdateStatementCache(t *testing.T) {
	tbl := versioned.MustTable("t", versioned.WithDialect(versioned.SQLite))
	lists := [][]string{{"a"}, {"b"}, {"a", "b"}, {"b", "a"}, {"a", "b", "c"}, {}}
	for i := 0; i < 80; i++ { // more lists than the cache holds
		lists = append(lists, []string{fmt.Sprintf("c%d", i)})
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 3; round++ {
				for i := range lists {
					cols := lists[(i+g)%len(lists)]
					c := &capture{}
					set := make([]versioned.Pair, len(cols))
					for j, col := range cols {
						set[j] = versioned.Set(col, j)
					}
					if _, err := versioned.Update(ctx, c, tbl, 1, 0, set...); err != nil {
						t.Error(err)
						return
					}
					want, _ := tbl.UpdateSQL(cols...)
					if len(c.sqls) != 1 || c.sqls[0] != want {
						t.Errorf("columns %v ran %q, want %q", cols, c.sqls, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// A cached column list is still checked for the version column.
	if _, err := versioned.Update(ctx, &capture{}, tbl, 1, 0, versioned.Set("version", 1)); !errors.Is(err, versioned.ErrInvalidArg) {
		t.Fatalf("version assignment: %v", err)
	}
}
