package gormplugin_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
	"github.com/sqlock/sqlock/versioned"
)

// The tests in this file run on a real MariaDB (internal/testing/mariatest)
// through gorm.io/driver/mysql; the backend-parameterised tests (the write
// matrix, features, fences) run there too, as "mariadb".

// TestNoLostUpdateMySQL: 32 goroutines × 300 increments of one row
// through GORM with the plugin, First + Update inside retry.Do, on
// MariaDB: exactly 9,600.
func TestNoLostUpdateMySQL(t *testing.T) {
	obs := &retryCounter{}
	db := openMariaDB(t, withObserver(obs))
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(32)
	sqlDB.SetMaxIdleConns(32)
	increment(t, db, 32, mariatest.Increments(), obs)
	if obs.retries.Load() != obs.stale.Load() {
		t.Fatalf("retries %d != stale conflicts %d: something other than stale versions was retried", obs.retries.Load(), obs.stale.Load())
	}
}

// inSnapshot begins a transaction (REPEATABLE READ, MySQL's default) that
// has read o's row, so its snapshot predates what other sessions do next.
func inSnapshot(t *testing.T, db *gorm.DB, id uint) *gorm.DB {
	t.Helper()
	tx := db.Begin()
	must(t, tx.Error)
	t.Cleanup(func() { tx.Rollback() })
	var n int64
	must(t, tx.Raw("SELECT COUNT(*) FROM orders WHERE id = ?", id).Scan(&n).Error)
	return tx
}

// TestMySQLProbeReadsTheNewestRowInRepeatableRead: after a stale write in
// a transaction whose snapshot predates another session's change, WithProbe
// reports the row as it is now (changed to version 5, or gone), and
// NullRefused reports a stale write for a NULL version another session has
// already set to 1 (not *NullVersionError, which is not retried).
func TestMySQLProbeReadsTheNewestRowInRepeatableRead(t *testing.T) {
	for _, c := range []struct {
		name  string
		opt   gormplugin.Option
		start string // the row's version before the other session acts
		other string
		check func(t *testing.T, err error)
	}{
		{"changed", gormplugin.WithProbe(), "1", "UPDATE orders SET version = 5 WHERE id = ?", func(t *testing.T, err error) {
			var se *versioned.StaleError
			if !errors.As(err, &se) || !se.Probed || se.Gone || se.Current != 5 {
				t.Fatalf("err = %#v, want stale, probed at version 5", err)
			}
		}},
		{"deleted", gormplugin.WithProbe(), "1", "DELETE FROM orders WHERE id = ?", func(t *testing.T, err error) {
			var se *versioned.StaleError
			if !errors.As(err, &se) || !se.Probed || !se.Gone {
				t.Fatalf("err = %#v, want stale, probed gone", err)
			}
		}},
		{"null-repaired", gormplugin.WithNullPolicy(gormplugin.NullRefused), "NULL", "UPDATE orders SET version = 1 WHERE id = ?", func(t *testing.T, err error) {
			var se *versioned.StaleError
			if errors.Is(err, gormplugin.ErrNullVersion) || !errors.As(err, &se) {
				t.Fatalf("err = %v, want stale (the row is at version 1 now), not a NULL version", err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openMariaDB(t, c.opt)
			must(t, db.AutoMigrate(&Order{}))
			o := Order{Status: "new"}
			must(t, db.Create(&o).Error)
			must(t, db.Exec("UPDATE orders SET version = "+c.start+" WHERE id = ?", o.ID).Error)
			o.Version = 0
			if c.start == "1" {
				o.Version = 1
			}
			tx := inSnapshot(t, db, o.ID)
			must(t, db.Exec(c.other, o.ID).Error)
			c.check(t, tx.Model(&o).Update("status", "paid").Error)
		})
	}
}

// TestMySQLUpsertsAreRefusedOrBumped: MySQL's ON DUPLICATE KEY UPDATE takes
// no WHERE and GORM's MySQL dialector builds it itself, so an upsert of one
// struct (which must be checked against its version) and an UpdateAll
// upsert (which would copy the struct's version into the row) are refused
// with sqlock.ErrUnsupported and change nothing; an upsert that names its
// columns (GORM's association saves, or one struct under SkipVersionCheck)
// bumps the row's version when it changes the row, never lowers it.
func TestMySQLUpsertsAreRefusedOrBumped(t *testing.T) {
	db := openMariaDB(t)
	must(t, db.AutoMigrate(&Order{}, &Shelf{}, &Item{}))
	o := newOrder(t, db, 3)
	stale := Order{ID: o.ID, Status: "stale", Version: 1}
	byID := []clause.Column{{Name: "id"}}
	for _, c := range []struct {
		name string
		db   *gorm.DB
	}{
		{"one struct, checked", db.Clauses(clause.OnConflict{Columns: byID, DoUpdates: clause.AssignmentColumns([]string{"status"})})},
		{"UpdateAll", db.Clauses(clause.OnConflict{UpdateAll: true})},
		{"UpdateAll, opted out", db.Scopes(gormplugin.SkipVersionCheck).Clauses(clause.OnConflict{UpdateAll: true})},
	} {
		s := stale
		if err := c.db.Create(&s).Error; !errors.Is(err, sqlock.ErrUnsupported) {
			t.Fatalf("%s: %v, want sqlock.ErrUnsupported", c.name, err)
		}
		if v, st, _ := rowOf(t, db, o.ID); v != 3 || st != "new" || s.Version != 1 {
			t.Fatalf("%s: row %s/%d, struct %d; want new/3/1", c.name, st, v, s.Version)
		}
	}
	// Opted out, with named columns: the version is bumped, never copied.
	must(t, db.Scopes(gormplugin.SkipVersionCheck).Clauses(clause.OnConflict{Columns: byID,
		DoUpdates: clause.AssignmentColumns([]string{"status", "version"})}).Create(&stale).Error)
	if v, st, _ := rowOf(t, db, o.ID); v != 4 || st != "stale" {
		t.Fatalf("opted-out upsert: row %s/%d; want stale/4", st, v)
	}
	// DO NOTHING is harmless and allowed.
	must(t, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&Order{ID: o.ID, Status: "x"}).Error)

	// GORM's association save: an item moved to another shelf is bumped;
	// an item saved again unchanged keeps its version.
	a := Shelf{Name: "a", Items: []Item{{Code: "x"}, {Code: "y"}}}
	must(t, db.Create(&a).Error)
	b := Shelf{Name: "b"}
	must(t, db.Create(&b).Error)
	moved := a.Items[0]
	b.Items = []Item{moved}
	must(t, db.Save(&b).Error)
	a.Items = a.Items[1:]
	must(t, db.Save(&a).Error)
	var items []Item
	must(t, db.Order("code").Find(&items).Error)
	if len(items) != 2 || items[0].ShelfID != b.ID || items[0].Version != 2 || items[1].ShelfID != a.ID || items[1].Version != 1 {
		t.Fatalf("items after the association saves: %+v (shelves a=%d b=%d); want x on b at version 2, y on a at version 1", items, a.ID, b.ID)
	}
}
