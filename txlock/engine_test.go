package txlock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	_ "github.com/glebarez/go-sqlite" // "sqlite"
	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/txlock"
)

// beginCounter counts the transactions a handle begins, to prove that a
// refused call sends nothing.
type beginCounter struct {
	*sql.DB
	begins int
}

func (b *beginCounter) BeginTx(ctx context.Context, o *sql.TxOptions) (*sql.Tx, error) {
	b.begins++
	return b.DB.BeginTx(ctx, o)
}

// TestDoRefusesMySQLAndSQLite: on a real MariaDB (and on SQLite) Do
// returns an error matching sqlock.ErrUnsupported before it begins a
// transaction, with or without TryOnce, on a *sql.DB and on a *sql.Conn,
// instead of the engine's syntax errors; fn never runs.
func TestDoRefusesMySQLAndSQLite(t *testing.T) {
	ctx := context.Background()
	my := mariatest.New(t)
	lite, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	key := advisory.KeyInt(42)
	for name, db := range map[string]*sql.DB{"mariadb": my.SQL(), "sqlite": lite} {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bc := &beginCounter{DB: db}
		for form, h := range map[string]txlock.DB{"*sql.DB": bc, "*sql.Conn": conn} {
			for _, opts := range [][]txlock.Option{nil, {txlock.TryOnce()}} {
				ran := false
				err := txlock.Do(ctx, h, key, func(context.Context, *sql.Tx) error { ran = true; return nil }, opts...)
				if !errors.Is(err, sqlock.ErrUnsupported) || ran {
					t.Fatalf("%s %s (%d options): err = %v, fn ran = %v; want sqlock.ErrUnsupported before fn", name, form, len(opts), err, ran)
				}
			}
		}
		conn.Close()
		if bc.begins != 0 {
			t.Fatalf("%s: %d transactions begun by refused calls", name, bc.begins)
		}
	}
}
