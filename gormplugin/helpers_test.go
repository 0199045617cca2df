package gormplugin_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m, mariatest.Close) }

// backend opens a fresh, empty database with the plugin installed.
type backend struct {
	name string
	open func(t testing.TB, opts ...gormplugin.Option) *gorm.DB
}

var backends = []backend{
	{"postgres", openPostgres},
	{"sqlite", openSQLite},
	{"mariadb", openMariaDB},
}

// openMariaDB opens a database of its own on the test binary's MariaDB
// (internal/testing/mariatest) through gorm.io/driver/mysql, with the driver's
// default DSN (no clientFoundRows) plus parseTime for time columns.
func openMariaDB(t testing.TB, opts ...gormplugin.Option) *gorm.DB {
	t.Helper()
	d := mariatest.New(t)
	return openWith(t, mysql.Open(d.DSNWith("parseTime=true")), opts)
}

func openPostgres(t testing.TB, opts ...gormplugin.Option) *gorm.DB {
	t.Helper()
	d := pgtest.New(t)
	return openWith(t, postgres.Open(d.DSN), opts)
}

func openSQLite(t testing.TB, opts ...gormplugin.Option) *gorm.DB {
	t.Helper()
	dsn := filepath.Join(t.TempDir(), "test.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	return openWith(t, sqlite.Open(dsn), opts)
}

func openWith(t testing.TB, d gorm.Dialector, opts []gormplugin.Option) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	if err := db.Use(gormplugin.New(opts...)); err != nil {
		t.Fatalf("use: %v", err)
	}
	return db
}

// sqlLog records every statement GORM runs.
type sqlLog struct {
	mu   sync.Mutex
	stmt []string
}

func (l *sqlLog) LogMode(logger.LogLevel) logger.Interface { return l }
func (l *sqlLog) Info(context.Context, string, ...any)     {}
func (l *sqlLog) Warn(context.Context, string, ...any)     {}
func (l *sqlLog) Error(context.Context, string, ...any)    {}
func (l *sqlLog) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	s, _ := fc()
	l.mu.Lock()
	l.stmt = append(l.stmt, s)
	l.mu.Unlock()
}

func (l *sqlLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.stmt...)
}

func (l *sqlLog) contains(word string) bool {
	for _, s := range l.all() {
		if strings.Contains(strings.ToUpper(s), word) {
			return true
		}
	}
	return false
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkErr asserts err matches want (nil means no error).
func checkErr(t testing.TB, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("error = %v, want %v", err, want)
	}
}

func withObserver(o observe.Observer) gormplugin.Option { return gormplugin.WithObserver(o) }

// sqlOf returns db's *sql.DB, so a second GORM can share its pool.
func sqlOf(tb testing.TB, db *gorm.DB) *sql.DB {
	tb.Helper()
	s, err := db.DB()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// rowChanged reports a probe that found the row at another version (or
// NULL): the row is there and changed.
func rowChanged(se *versioned.StaleError) bool {
	return se.Probed && !se.Gone && (se.CurrentNull || se.Current != se.Expected)
}

// rowUnchanged reports a probe that found the row at the expected version:
// another condition of the statement failed.
func rowUnchanged(se *versioned.StaleError) bool {
	return se.Probed && !se.Gone && !se.CurrentNull && se.Current == se.Expected
}
