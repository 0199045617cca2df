package gormplugin_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/versioned"
)

// checkedUpsert is a checked upsert of one struct: ON CONFLICT (id) DO
// UPDATE of its status, without SkipVersionCheck.
func checkedUpsert(db *gorm.DB) *gorm.DB {
	return db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"status"})})
}

// TestStaleProbeReportsNullVersion: WithProbe, a write that fails stale
// against a row whose version is NULL says so — CurrentNull, "NULL" in
// the message, never "now at version 0" — for updates, deletes and
// checked upserts.
func TestStaleProbeReportsNullVersion(t *testing.T) {
	forEachUpsertBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Order{}))
		o := newOrder(t, db, 3)
		must(t, db.Exec("UPDATE orders SET version = NULL WHERE id = ?", o.ID).Error)
		check := func(what string, err error) {
			t.Helper()
			var se *versioned.StaleError
			if !errors.As(err, &se) || !rowChanged(se) || !se.CurrentNull || se.Current != 0 || se.Expected != 3 {
				t.Fatalf("%s: %v (%+v)", what, err, se)
			}
			if msg := err.Error(); !strings.Contains(msg, "NULL") || strings.Contains(msg, "now at version") {
				t.Fatalf("%s: message %q", what, msg)
			}
		}
		c := o
		check("update", db.Model(&c).Update("status", "x").Error)
		c = o
		check("delete", db.Delete(&c).Error)
		c = o
		check("upsert", checkedUpsert(db).Create(&c).Error)
		if v, st, _ := rowOf(t, db, o.ID); v != -1 || st != "new" {
			t.Fatalf("row changed: %s/%d", st, v)
		}
		// A real version that is not the expected one is a number.
		must(t, db.Exec("UPDATE orders SET version = 0 WHERE id = ?", o.ID).Error)
		c = o
		err := db.Model(&c).Update("status", "x").Error
		var se *versioned.StaleError
		if !errors.As(err, &se) || se.CurrentNull || se.Current != 0 || !strings.Contains(err.Error(), "now at version 0") {
			t.Fatalf("version 0: %v (%+v)", err, se)
		}
	}, gormplugin.WithProbe())
}
