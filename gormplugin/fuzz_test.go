package gormplugin_test

import (
	"errors"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/versioned"
)

// FuzzConditions builds a versioned single-row update with an arbitrary
// chain of Where/Or/Not conditions (encoded in ops) and runs it, stale and
// fresh, against three rows on SQLite. Whatever the conditions, a stale
// write changes nothing and fails, and a fresh write changes at most the
// target row: the key and version conditions can never be bypassed.
func FuzzConditions(f *testing.F) {
	for _, seed := range [][]byte{
		{}, {1}, {0, 1}, {1, 1}, {2}, {0, 2, 1}, {3}, {1, 3}, {4, 1}, {0, 1, 2, 3, 4, 5},
		{5, 5, 1}, {1, 0}, {6, 1}, {7, 1, 0},
	} {
		f.Add(seed)
	}
	db, err := gorm.Open(sqlite.Open(":memory:"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		f.Fatal(err)
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1)
	if err := db.Use(gormplugin.New()); err != nil {
		f.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		f.Fatal(err)
	}
	conds := []string{"status = 'new'", "status = 'other'", "amount > 0", "1 = 1", "status = 'new' OR status = 'other'", "amount = 10 AND status <> 'x'"}
	build := func(tx *gorm.DB, ops []byte) *gorm.DB {
		for i, op := range ops {
			if i >= 8 {
				break
			}
			c := conds[int(op>>3)%len(conds)]
			switch op % 8 {
			case 0, 5:
				tx = tx.Where(c)
			case 1, 6:
				tx = tx.Or(c)
			case 2:
				tx = tx.Not(c)
			case 3:
				tx = tx.Where(clause.Or(clause.Expr{SQL: c}, clause.Expr{SQL: "status = 'other'"}))
			case 4:
				tx = tx.Or(clause.And(clause.Expr{SQL: c}, clause.Expr{SQL: "1 = 1"}))
			case 7:
				tx = tx.Where(tx.Session(&gorm.Session{NewDB: true}).Where(c).Or("status = 'other'"))
			}
		}
		return tx
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if err := db.Exec("DELETE FROM orders").Error; err != nil {
			t.Fatal(err)
		}
		target := Order{Status: "new", Amount: 10}
		if err := db.Create(&target).Error; err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := db.Create(&Order{Status: "other", Amount: 10}).Error; err != nil {
				t.Fatal(err)
			}
		}
		changed := func() (n int64) {
			db.Model(&Order{}).Where("amount <> 10 OR version <> 1").Count(&n)
			return n
		}
		stale := target
		stale.Version = 0 // the row is at 1
		err := build(db.Model(&stale), ops).Update("amount", 99).Error
		if err == nil || !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("stale write with ops %v: error %v", ops, err)
		}
		if n := changed(); n != 0 {
			t.Fatalf("stale write with ops %v changed %d rows", ops, n)
		}
		fresh := target
		err = build(db.Model(&fresh), ops).Update("amount", 99).Error
		if err != nil && !errors.Is(err, versioned.ErrStale) {
			t.Fatalf("fresh write with ops %v: %v", ops, err)
		}
		var others int64
		db.Model(&Order{}).Where("id <> ? AND (amount <> 10 OR version <> 1)", target.ID).Count(&others)
		if others != 0 {
			t.Fatalf("fresh write with ops %v changed %d other rows", ops, others)
		}
	})
}
