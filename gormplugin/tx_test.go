package gormplugin_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

type Plain struct {
	ID uint
	N  int64
}

// heldHere counts the advisory locks this transaction's backend holds.
func heldHere(tx *gorm.DB) (n int64, err error) {
	err = tx.Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND pid = pg_backend_pid()`).Scan(&n).Error
	return n, err
}

func TestTransactionLocks(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	db := openWith(t, postgres.Open(d.DSN), nil)
	cfg, err := pgx.ParseConfig(d.DSN)
	must(t, err)
	folded := openWith(t, postgres.New(postgres.Config{Conn: txlock.OpenDB(*cfg)}), nil)
	must(t, db.AutoMigrate(&Plain{}, &Order{}))
	key := advisory.KeyOf("plain-counter")

	for name, g := range map[string]*gorm.DB{"begin-then-lock": db, "folded-into-begin": folded} {
		t.Run(name+"/held-inside", func(t *testing.T) {
			err := gormplugin.Transaction(ctx, g, key, func(tx *gorm.DB) error {
				n, err := heldHere(tx)
				if err != nil {
					return err
				}
				if n != 2 {
					t.Errorf("%d advisory locks held inside, want 2", n)
				}
				return nil
			}, txlock.AlsoLock(advisory.KeyInt(7)))
			must(t, err)
		})
	}

	t.Run("mutual-exclusion", func(t *testing.T) {
		c := Plain{}
		must(t, db.Create(&c).Error)
		const workers, each = 8, 25
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for i := range workers {
			g := db
			if i%2 == 1 {
				g = folded
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					err := gormplugin.Transaction(ctx, g, key, func(tx *gorm.DB) error {
						var cur Plain // unversioned: only the lock keeps this correct
						if err := tx.First(&cur, c.ID).Error; err != nil {
							return err
						}
						return tx.Model(&cur).Update("n", cur.N+1).Error
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var got Plain
		must(t, db.First(&got, c.ID).Error)
		if got.N != workers*each {
			t.Fatalf("n = %d, want %d", got.N, workers*each)
		}
	})

	t.Run("rollback-on-error", func(t *testing.T) {
		boom := errors.New("boom")
		err := gormplugin.Transaction(ctx, db, key, func(tx *gorm.DB) error {
			if err := tx.Create(&Plain{N: -1}).Error; err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("error %v, want boom", err)
		}
		var n int64
		must(t, db.Model(&Plain{}).Where("n = -1").Count(&n).Error)
		if n != 0 {
			t.Fatal("the failed transaction's insert survived")
		}
		// Nothing stays locked.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			var ok bool
			k, _ := key.Int64()
			if err := tx.Raw("SELECT pg_try_advisory_xact_lock(?)", k).Scan(&ok).Error; err != nil {
				return err
			}
			if !ok {
				t.Error("the lock outlived its transaction")
			}
			return nil
		}))
	})

	t.Run("stale-retried", func(t *testing.T) {
		o := Order{Status: "new"}
		must(t, db.Create(&o).Error)
		attempts := 0
		err := gormplugin.Transaction(ctx, db, advisory.KeyOf("order"), func(tx *gorm.DB) error {
			attempts++
			var cur Order
			if err := tx.First(&cur, o.ID).Error; err != nil {
				return err
			}
			if attempts == 1 {
				// A writer that does not take the lock gets in between.
				if err := db.Exec("UPDATE orders SET version = version + 1 WHERE id = ?", o.ID).Error; err != nil {
					return err
				}
			}
			return tx.Model(&cur).Update("status", "paid").Error
		})
		must(t, err)
		if attempts != 2 {
			t.Fatalf("%d attempts, want 2 (one stale, retried)", attempts)
		}
		var got Order
		must(t, db.First(&got, o.ID).Error)
		if got.Status != "paid" || got.Version != 3 {
			t.Fatalf("row %+v", got)
		}
		// Without retries the stale error comes back as it is.
		err = gormplugin.Transaction(ctx, db, advisory.KeyOf("order"), func(tx *gorm.DB) error {
			stale := got
			stale.Version = 1
			return tx.Model(&stale).Update("status", "x").Error
		}, txlock.WithoutRetry())
		checkErr(t, err, versioned.ErrStale)
	})

	t.Run("try-once", func(t *testing.T) {
		var ran atomic.Bool
		err := gormplugin.Transaction(ctx, db, key, func(outer *gorm.DB) error {
			return gormplugin.Transaction(ctx, folded, key, func(*gorm.DB) error {
				ran.Store(true)
				return nil
			}, txlock.TryOnce(), txlock.WithoutRetry())
		})
		checkErr(t, err, txlock.ErrNotAcquired)
		if ran.Load() {
			t.Fatal("fn ran without the lock")
		}
	})

	t.Run("nested-same-pool", func(t *testing.T) {
		// Inside the function, a locked transaction or an advisory lock on
		// the same key through the same *sql.DB would wait for its own
		// caller: refused at once (with an hour-long bound it would otherwise hang the test).
		noop := func(*gorm.DB) error { return nil }
		err := gormplugin.Transaction(ctx, db, key, func(outer *gorm.DB) error {
			return gormplugin.Transaction(outer.Statement.Context, db, key, noop, txlock.WithTimeout(time.Hour))
		})
		checkErr(t, err, txlock.ErrAlreadyHeld)
		sqlDB, err := db.DB()
		must(t, err)
		err = advisory.New(sqlDB).Do(ctx, key, func(ctx context.Context) error {
			return gormplugin.Transaction(ctx, db, key, noop, txlock.WithTimeout(time.Hour))
		})
		checkErr(t, err, advisory.ErrAlreadyHeld)
		// Another key runs.
		err = gormplugin.Transaction(ctx, db, advisory.KeyOf("other"), func(outer *gorm.DB) error {
			return gormplugin.Transaction(outer.Statement.Context, db, key, noop)
		})
		must(t, err)
	})

	t.Run("bad-input", func(t *testing.T) {
		noop := func(*gorm.DB) error { return nil }
		checkErr(t, gormplugin.Transaction(ctx, nil, key, noop), sqlock.ErrNilHandle)
		checkErr(t, gormplugin.Transaction(ctx, db, key, nil), sqlock.ErrNilHandle)
		checkErr(t, gormplugin.Transaction(ctx, db, key, noop, txlock.AlsoLock(advisory.Key{})), advisory.ErrInvalidKey)
		checkErr(t, gormplugin.Transaction(ctx, db, advisory.Key{}, noop), advisory.ErrInvalidKey)
	})
}

func TestTransactionRefusesSQLite(t *testing.T) {
	db := openSQLite(t)
	called := false
	err := gormplugin.Transaction(context.Background(), db, advisory.KeyOf("x"), func(*gorm.DB) error {
		called = true
		return nil
	})
	var ue *gormplugin.UnsupportedError
	if !errors.Is(err, sqlock.ErrUnsupported) || !errors.As(err, &ue) || called {
		t.Fatalf("error %v (fn called: %v), want *UnsupportedError", err, called)
	}
	t.Log(err)
}
