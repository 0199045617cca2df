package gormplugin_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/lib/pq"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
)

// TestTransactionWorksWithPrepareStmt runs gormplugin.Transaction (one key
// and several) with GORM's PrepareStmt on and off, on each database/sql
// driver the docs name: pgx's stdlib (postgres.Open), txlock.OpenDB (the
// lock folded into BEGIN) and lib/pq. The lock is held inside fn and a
// versioned write inside fn commits.
func TestTransactionWorksWithPrepareStmt(t *testing.T) {
	ctx := context.Background()
	// Each case gets its own database: GORM's migrator cannot inspect an
	// existing table through lib/pq.
	drivers := map[string]func(t *testing.T, dsn string) gorm.Dialector{
		"pgx-stdlib": func(_ *testing.T, dsn string) gorm.Dialector { return postgres.Open(dsn) },
		"txlock-OpenDB": func(t *testing.T, dsn string) gorm.Dialector {
			cfg, err := pgx.ParseConfig(dsn)
			must(t, err)
			return postgres.New(postgres.Config{Conn: txlock.OpenDB(*cfg)})
		},
		"lib-pq": func(t *testing.T, dsn string) gorm.Dialector {
			pq, err := sql.Open("postgres", dsn)
			must(t, err)
			return postgres.New(postgres.Config{Conn: pq})
		},
	}
	for name, dial := range drivers {
		for _, prepare := range []bool{false, true} {
			t.Run(name+"/PrepareStmt="+map[bool]string{false: "off", true: "on"}[prepare], func(t *testing.T) {
				db, err := gorm.Open(dial(t, pgtest.New(t).DSN), &gorm.Config{Logger: logger.Discard, PrepareStmt: prepare})
				must(t, err)
				t.Cleanup(func() { sqlOf(t, db).Close() })
				must(t, err)
				must(t, db.Use(gormplugin.New()))
				must(t, db.AutoMigrate(&Order{}))
				o := Order{Status: "new"}
				must(t, db.Create(&o).Error)
				for _, keys := range [][]advisory.Key{{advisory.KeyOf("prepare")}, {advisory.KeyOf("a"), advisory.KeyInt(2)}} {
					err := gormplugin.Transaction(ctx, db, keys[0], func(tx *gorm.DB) error {
						n, err := heldHere(tx)
						if err != nil {
							return err
						}
						if n != int64(len(keys)) {
							t.Errorf("%d advisory locks held inside, want %d", n, len(keys))
						}
						return tx.Model(&o).Update("amount", o.Amount+1).Error
					}, txlock.AlsoLock(keys[1:]...))
					must(t, err)
				}
				var got Order
				must(t, db.First(&got, o.ID).Error)
				if got.Version != 3 || o.Version != 3 || got.Amount != 2 {
					t.Fatalf("row %+v, struct version %d: want version 3, amount 2", got, o.Version)
				}
			})
		}
	}
}
