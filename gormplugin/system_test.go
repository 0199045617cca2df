package gormplugin_test

import (
	"errors"
	"path"
	"testing"

	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/versioned"
)

// TestStaleEventSystem: every stale event the plugin reports names the
// database of the GORM dialector in observe.Event.System, as
// OpenTelemetry's db.system.name spells it ("mysql" for MariaDB:
// gorm.io/driver/mysql serves both under one name), for a stale update, a
// stale delete and a stale write of a row that is gone.
func TestStaleEventSystem(t *testing.T) {
	want := map[string]string{"postgres": "postgresql", "sqlite": "sqlite", "mariadb": "mysql"}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			rec := &observetest.Recorder{}
			db := be.open(t, gormplugin.WithObserver(rec), gormplugin.WithProbe())
			must(t, db.AutoMigrate(&Order{}))
			o := Order{Status: "new"}
			must(t, db.Create(&o).Error)
			a, b := o, o
			must(t, db.Model(&a).Update("status", "paid").Error)
			if err := db.Model(&b).Update("status", "void").Error; !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("stale update: %v", err)
			}
			if err := db.Delete(&b).Error; !errors.Is(err, versioned.ErrStale) {
				t.Fatalf("stale delete: %v", err)
			}
			must(t, db.Delete(&a).Error)
			var se *versioned.StaleError
			if err := db.Model(&a).Update("status", "late").Error; !errors.As(err, &se) || !se.Gone {
				t.Fatalf("write of a gone row: %v", err)
			}
			ev := rec.Events()
			if len(ev) != 3 {
				t.Fatalf("%d events, want 3", len(ev))
			}
			for _, e := range ev {
				if e.Kind != observe.Stale || e.Source != "gormplugin" || e.System != want[path.Base(t.Name())] ||
					e.Table != "orders" || !errors.Is(e.Err, versioned.ErrStale) {
					t.Fatalf("event %+v, want a stale event with System %q", e, want[path.Base(t.Name())])
				}
			}
		})
	}
}
