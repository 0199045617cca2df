package txlock

import (
	"database/sql"
	"database/sql/driver"
	"reflect"
	"strings"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/errkind"
)

// otherEngine refuses, before anything is sent, a handle whose database/sql
// driver is known to serve another engine (MySQL, MariaDB, SQLite), where
// PostgreSQL's transaction advisory locks do not exist: the lock
// statements would otherwise fail with the engine's own syntax errors. It
// reads the driver's Go package path (go-sql-driver/mysql, modernc.org/sqlite,
// mattn/go-sqlite3, glebarez/go-sqlite …), so a driver it does not know is
// let through to the server, which refuses it there.
func otherEngine(db DB) error {
	var drv any
	switch h := db.(type) {
	case interface{ Driver() driver.Driver }: // *sql.DB, *sqlx.DB
		drv = h.Driver()
	case *sql.Conn:
		_ = h.Raw(func(dc any) error { drv = dc; return nil })
	}
	if drv == nil {
		return nil
	}
	t := reflect.TypeOf(drv)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := strings.ToLower(t.PkgPath())
	engine := ""
	switch {
	case strings.Contains(path, "mysql"):
		engine = "MySQL/MariaDB"
	case strings.Contains(path, "sqlite"):
		engine = "SQLite"
	default:
		return nil
	}
	return errkind.New(sqlock.ErrUnsupported,
		"txlock: transaction advisory locks need PostgreSQL; this handle's driver (%s) serves %s, which has none", t.PkgPath(), engine)
}
