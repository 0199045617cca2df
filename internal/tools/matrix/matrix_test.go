package main

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/idem"
	"github.com/sqlock/sqlock/internal/testing/matrix"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/lease"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/txlock"
	"github.com/sqlock/sqlock/versioned"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pgFaults are the faults faults_test.go attaches to the load rows, by
// Mechanism; it adds them in an init function.
var pgFaults = map[string][]matrix.Fault{}

// faultRows are rows faults_test.go adds for a fault only (a mechanism in
// a form no load row has, such as a lease written without its token).
var faultRows []matrix.Row

// TestMatrix is the root module's part of make matrix: the load rows of
// every mechanism of the root module, their faults, on the grid MATRIX
// names (see internal/testing/matrix).
func TestMatrix(t *testing.T) {
	if served, err := matrix.ServePausedHolder(openLeaseHolder); served {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	rows := loadRows()
	attached := map[string]bool{}
	for i := range rows {
		rows[i].Faults = append(rows[i].Faults, pgFaults[rows[i].Mechanism]...)
		attached[rows[i].Mechanism] = true
	}
	for m := range pgFaults {
		if !attached[m] {
			t.Errorf("faults for %q, which no load row is", m)
		}
	}
	matrix.Run(t, append(rows, faultRows...)...)
}

// The root module's load rows, in three groups: the optimistic forms
// (each re-reads and writes conditionally, Apply's unguarded body being
// what they replace), the locks (each guards State.Apply), and
// idempotency (payment only: the same order's charge replayed). Each group
// has its mechanism written by hand as a baseline.
func loadRows() []matrix.Row {
	all := matrix.Workloads
	return []matrix.Row{
		{Mechanism: "versioned+retry", Group: "optimistic", Workloads: all, Open: perContender(versionedRetry)},
		{Mechanism: "gormplugin+retry", Group: "optimistic", Workloads: all, Open: gormRetry},
		{Mechanism: "CAS", Group: "optimistic", Workloads: all, Open: perContender(compareAndSwap)},
		{Mechanism: "DoOptimistic", Group: "optimistic", Workloads: all, Open: doOptimistic},
		{Mechanism: "by hand: UPDATE … WHERE version", Group: "optimistic", Workloads: all, Open: perContender(byHandVersion)},
		{Mechanism: "txlock", Group: "lock", Workloads: all, Open: txlockDo},
		{Mechanism: "advisory", Group: "lock", Workloads: all, Open: advisorySession},
		{Mechanism: "lease", Group: "lock", Workloads: all, Open: leaseRow(fencedWrite)},
		{Mechanism: "lease+Guard", Group: "lock", Workloads: all, Open: leaseRow(guardedWrite)},
		{Mechanism: "by hand: pg_advisory_xact_lock", Group: "lock", Workloads: all, Open: perContender(byHandXactLock)},
		{Mechanism: "idem", Group: "idempotency", Workloads: []matrix.Workload{matrix.Payment}, Open: idemDoTx},
		{Mechanism: "by hand: claim row", Group: "idempotency", Workloads: []matrix.Workload{matrix.Payment}, Open: byHandClaim},
	}
}

// perContender is an Open whose actors are all op on the cell's DB.
func perContender(op func(ctx context.Context, c *matrix.Cell, key string) (matrix.Result, error)) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		return same(c, func(ctx context.Context, key string) (matrix.Result, error) { return op(ctx, c, key) }), nil, nil
	}
}

// same is c.Contenders actors that all run op.
func same(c *matrix.Cell, op matrix.ActorFunc) []matrix.Actor {
	actors := make([]matrix.Actor, c.Contenders)
	for i := range actors {
		actors[i] = op
	}
	return actors
}

// openTx opens the handle txlock, lease's Guard and idem want — BEGIN
// carries their statement — on the cell's network, counted, with a
// connection dialled for each contender, as the cell's own handle has.
func openTx(ctx context.Context, c *matrix.Cell) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(c.DSN)
	if err != nil {
		return nil, err
	}
	cfg.DialFunc = c.Dial
	db := txlock.OpenDB(*cfg)
	db.SetMaxOpenConns(2*c.Contenders + 4)
	db.SetMaxIdleConns(2*c.Contenders + 4)
	if err := matrix.Warm(ctx, db, c.Contenders); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// itemsTable is c's items as versioned describes them.
func itemsTable(c *matrix.Cell) *versioned.Table {
	return versioned.MustTable(c.State.Items, versioned.WithKey("key"))
}

// optimistic is one attempt of an optimistic form: read, check, the
// conditional write, the record. write returns whether it won.
func optimistic(ctx context.Context, c *matrix.Cell, q matrix.Querier, key string,
	write func(it matrix.Item, qty int64) (bool, error)) (matrix.Result, error) {
	it, err := c.State.Read(ctx, q, key)
	if err != nil {
		return 0, err
	}
	qty, ok := it.Next()
	if !ok {
		return matrix.Refused, nil
	}
	won, err := write(it, qty)
	if err != nil || !won {
		return 0, err
	}
	return matrix.Done, c.State.Record(ctx, q, key, 0)
}

func versionedRetry(ctx context.Context, c *matrix.Cell, key string) (matrix.Result, error) {
	t := itemsTable(c)
	return retry.DoValue(ctx, func(ctx context.Context) (matrix.Result, error) {
		return optimistic(ctx, c, c.DB, key, func(it matrix.Item, qty int64) (bool, error) {
			_, err := versioned.Update(ctx, c.DB, t, key, it.Version, versioned.Set("qty", qty))
			return err == nil, err
		})
	})
}

// compareAndSwap is versioned's compare-and-swap on the quantity itself:
// no version column, the value read is the expectation; a lost swap
// re-reads.
func compareAndSwap(ctx context.Context, c *matrix.Cell, key string) (matrix.Result, error) {
	t := itemsTable(c)
	for {
		r, err := optimistic(ctx, c, c.DB, key, func(it matrix.Item, qty int64) (bool, error) {
			res, err := versioned.CompareAndSwap(ctx, c.DB, t, key,
				[]versioned.Pair{versioned.Eq("qty", it.Qty)}, versioned.Set("qty", qty))
			return res == versioned.Won, err
		})
		if err != nil || r != 0 {
			return r, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// byHandVersion is the optimistic write as one writes it without the
// library: UPDATE … WHERE version = $n, re-read on 0 rows.
func byHandVersion(ctx context.Context, c *matrix.Cell, key string) (matrix.Result, error) {
	for {
		r, err := optimistic(ctx, c, c.DB, key, func(it matrix.Item, qty int64) (bool, error) {
			res, err := c.DB.ExecContext(ctx, "UPDATE "+c.State.Items+
				" SET qty = $2, version = version + 1 WHERE key = $1 AND version = $3", key, qty, it.Version)
			if err != nil {
				return false, err
			}
			n, err := res.RowsAffected()
			return n == 1, err
		})
		if err != nil || r != 0 {
			return r, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// gormItem is an item as a GORM model, versioned by the plugin.
type gormItem struct {
	Key     string `gorm:"primaryKey"`
	Qty     int64
	Version int64 `gorm:"not null;default:1" lock:"version"`
}

func gormRetry(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: c.DB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, err
	}
	if err := db.Use(gormplugin.New()); err != nil {
		return nil, nil, err
	}
	items := c.State.Items
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		return retry.DoValue(ctx, func(ctx context.Context) (matrix.Result, error) {
			var it gormItem
			if err := db.WithContext(ctx).Table(items).Take(&it, "key = ?", key).Error; err != nil {
				return 0, err
			}
			if it.Qty <= 0 {
				return matrix.Refused, nil
			}
			if err := db.WithContext(ctx).Table(items).Model(&it).Update("qty", it.Qty-1).Error; err != nil {
				return 0, err
			}
			return matrix.Done, c.State.Record(ctx, c.DB, key, 0)
		})
	}
	return same(c, op), nil, nil
}

func doOptimistic(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	db, err := openTx(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	t := itemsTable(c)
	var hot txlock.HotKeys
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		var r matrix.Result
		err := txlock.DoOptimistic(ctx, db, lockKey(c, key), func(ctx context.Context, q txlock.Querier) (err error) {
			r, err = optimistic(ctx, c, q, key, func(it matrix.Item, qty int64) (bool, error) {
				_, err := versioned.Update(ctx, q, t, key, it.Version, versioned.Set("qty", qty))
				return err == nil, err
			})
			return err
		}, txlock.WithHotKeys(&hot))
		return r, err
	}
	return same(c, op), func() { db.Close() }, nil
}

// lockKey is the advisory key of a cell's item: cells never share one.
func lockKey(c *matrix.Cell, key string) advisory.Key {
	return advisory.KeyOf(c.State.Schema + ":" + key)
}

func txlockDo(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	db, err := openTx(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		var r matrix.Result
		err := txlock.Do(ctx, db, lockKey(c, key), func(ctx context.Context, tx *sql.Tx) (err error) {
			r, err = c.State.Apply(ctx, tx, key, 0)
			return err
		})
		return r, err
	}
	return same(c, op), func() { db.Close() }, nil
}

// byHandXactLock is txlock written by hand: BEGIN, pg_advisory_xact_lock,
// the body, COMMIT, on a plain handle.
func byHandXactLock(ctx context.Context, c *matrix.Cell, key string) (matrix.Result, error) {
	tx, err := c.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", c.State.Schema+":"+key); err != nil {
		return 0, err
	}
	r, err := c.State.Apply(ctx, tx, key, 0)
	if err != nil {
		return 0, err
	}
	return r, tx.Commit()
}

func advisorySession(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	l := advisory.New(c.DB)
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		var r matrix.Result
		err := l.Do(ctx, lockKey(c, key), func(ctx context.Context) (err error) {
			r, err = c.State.Apply(ctx, c.DB, key, 0)
			return err
		})
		return r, err
	}
	return same(c, op), nil, nil
}

// leaseTTL outlasts any operation of a load cell: the load measures the
// lease, the faults its expiry.
const leaseTTL = 30 * time.Second

// leaseWrite is how a lease row's body writes under the lease.
type leaseWrite int

const (
	fencedWrite   leaseWrite = iota // fenced with the lease's token
	guardedWrite                    // in a transaction the lease guards (BeginGuarded)
	unfencedWrite                   // unconditionally: a TTL lock whose holder does not pass its token to the data, as the article's Redis lock
)

// leaseRow is a lease around the body, which writes as w says.
func leaseRow(w leaseWrite) func(context.Context, *matrix.Cell) ([]matrix.Actor, func(), error) {
	return func(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
		db, err := openTx(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		if err := lease.Migrate(ctx, db); err != nil {
			db.Close()
			return nil, nil, err
		}
		m := lease.New(db)
		op := func(ctx context.Context, key string) (r matrix.Result, err error) {
			l, err := m.Acquire(ctx, matrix.LockName(c, key), leaseTTL)
			if err != nil {
				return 0, err
			}
			defer func() {
				if rerr := l.Release(context.WithoutCancel(ctx)); err == nil {
					err = rerr
				}
			}()
			switch w {
			case fencedWrite:
				return c.State.Apply(ctx, db, key, l.Token())
			case unfencedWrite:
				return c.State.Apply(ctx, db, key, 0)
			}
			tx, err := l.BeginGuarded(ctx, db, nil)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			if r, err = c.State.Apply(ctx, tx, key, 0); err != nil {
				return 0, err
			}
			return r, tx.Commit()
		}
		return same(c, op), func() { db.Close() }, nil
	}
}

// idemDoTx charges an order once however many contenders receive it: the
// order's key claimed with BEGIN, the result stored with COMMIT; a
// contender that finds it recorded replays it, which counts as refused.
func idemDoTx(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	db, err := openTx(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if err := idem.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	scope := c.State.Schema
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		ran := false
		r, err := idem.DoTx(ctx, db, scope, key, nil, func(ctx context.Context, tx *sql.Tx) (matrix.Result, error) {
			ran = true
			return c.State.Apply(ctx, tx, key, 0)
		})
		if err == nil && !ran {
			r = matrix.Refused
		}
		return r, err
	}
	return same(c, op), func() { db.Close() }, nil
}

// byHandClaim is idem's guarantee written carefully by hand: a claim row
// under UNIQUE in the same transaction (a second claimant waits on the
// index, then finds it), the result stored before COMMIT, a replay read.
func byHandClaim(ctx context.Context, c *matrix.Cell) ([]matrix.Actor, func(), error) {
	claims := c.State.Schema + ".claims"
	if _, err := c.DB.ExecContext(ctx, "CREATE TABLE "+claims+" (key text PRIMARY KEY, result int)"); err != nil {
		return nil, nil, err
	}
	op := func(ctx context.Context, key string) (matrix.Result, error) {
		tx, err := c.DB.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, "INSERT INTO "+claims+" (key) VALUES ($1) ON CONFLICT DO NOTHING", key)
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, err
		} else if n == 0 { // claimed and committed by another: replay its result
			var stored sql.NullInt64
			if err := tx.QueryRowContext(ctx, "SELECT result FROM "+claims+" WHERE key = $1", key).Scan(&stored); err != nil {
				return 0, err
			}
			if !stored.Valid {
				return 0, fmt.Errorf("claim of %s committed without its result", key)
			}
			return matrix.Refused, nil
		}
		r, err := c.State.Apply(ctx, tx, key, 0)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+claims+" SET result = $2 WHERE key = $1", key, int(r)); err != nil {
			return 0, err
		}
		return r, tx.Commit()
	}
	return same(c, op), nil, nil
}
