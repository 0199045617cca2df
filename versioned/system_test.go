package versioned_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	_ "github.com/glebarez/go-sqlite"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

// TestStaleEventSystem: the stale event of every dialect names the
// database in observe.Event.System as OpenTelemetry's db.system.name
// spells it, on a real server of each kind (MariaDB through the MySQL
// dialect reports "mysql": the dialect does not tell them apart). Plain,
// probed and fenced writes report it alike, and a fenced-out write, which
// is no stale version, reports nothing.
func TestStaleEventSystem(t *testing.T) {
	const ddl = `CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, version BIGINT NOT NULL DEFAULT 1, fence BIGINT NULL)`
	for _, tc := range []struct {
		name    string
		dialect versioned.Dialect
		system  string
		open    func(t *testing.T) *sql.DB
	}{
		{"postgres", versioned.Postgres, "postgresql", func(t *testing.T) *sql.DB {
			pg := pgtest.New(t)
			pg.Exec(ddl)
			return pg.SQL()
		}},
		{"mariadb", versioned.MySQL, "mysql", func(t *testing.T) *sql.DB {
			my := mariatest.New(t)
			my.Exec(ddl)
			return my.SQL()
		}},
		{"sqlite", versioned.SQLite, "sqlite", func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "s.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if _, err := db.Exec(ddl); err != nil {
				t.Fatal(err)
			}
			return db
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.open(t)
			ctx := ctxT(t)
			if _, err := db.ExecContext(ctx, `INSERT INTO items (id, name, version, fence) VALUES (1, 'a', 1, 5)`); err != nil {
				t.Fatal(err)
			}
			rec := &observetest.Recorder{}
			plain := versioned.MustTable("items", versioned.WithDialect(tc.dialect), versioned.WithObserver(rec))
			probed := versioned.MustTable("items", versioned.WithDialect(tc.dialect), versioned.WithObserver(rec), versioned.WithProbe())

			if _, err := versioned.Update(ctx, db, plain, 1, int64(7), versioned.Set("name", "b")); !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("stale update: %v", err)
			}
			if err := versioned.Delete(ctx, db, probed, 2, int64(1)); !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("stale delete of a missing row: %v", err)
			}
			if _, err := versioned.Update(ctx, db, plain, 1, int64(7), versioned.Set("name", "c"), versioned.Fence("fence", 9)); !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("stale fenced update: %v", err)
			}
			if _, err := versioned.Update(ctx, db, plain, 1, int64(1), versioned.Set("name", "d"), versioned.Fence("fence", 3)); !errors.Is(err, versioned.ErrFenced) {
				t.Fatalf("fenced-out update: %v", err)
			}
			ev := rec.Events()
			if len(ev) != 3 {
				t.Fatalf("%d events, want 3 (the fenced-out write is not stale): %+v", len(ev), ev)
			}
			for _, e := range ev {
				if e.Kind != observe.Stale || e.Source != "versioned" || e.System != tc.system || e.Table != "items" || !errors.Is(e.Err, versioned.ErrStale) {
					t.Fatalf("event %+v, want a stale event of versioned with System %q", e, tc.system)
				}
			}
		})
	}
}
