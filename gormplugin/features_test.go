package gormplugin_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/internal/testing/observetest"
	"github.com/sqlock/sqlock/observe"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

type Doc struct {
	ID        uint
	Title     string
	Rev       int32 `lock:"version"`
	DeletedAt gorm.DeletedAt
}

func forEachBackend(t *testing.T, f func(t *testing.T, db *gorm.DB), opts ...gormplugin.Option) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { f(t, be.open(t, opts...)) })
	}
}

// forEachUpsertBackend runs f on the backends where the plugin checks an
// upsert of one struct against its version (ON CONFLICT … DO UPDATE …
// WHERE): PostgreSQL and SQLite. MySQL refuses those upserts
// (TestMySQLUpsertsAreRefusedOrBumped).
func forEachUpsertBackend(t *testing.T, f func(t *testing.T, db *gorm.DB), opts ...gormplugin.Option) {
	for _, be := range backends {
		if be.name != "mariadb" {
			t.Run(be.name, func(t *testing.T) { f(t, be.open(t, opts...)) })
		}
	}
}

// forEachReturningBackend runs f on the backends whose UPDATE takes a
// RETURNING clause: PostgreSQL and SQLite, not MySQL or MariaDB.
func forEachReturningBackend(t *testing.T, f func(t *testing.T, db *gorm.DB), opts ...gormplugin.Option) {
	forEachUpsertBackend(t, f, opts...)
}

func TestSoftDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Doc{}))
		d := Doc{Title: "a"}
		must(t, db.Create(&d).Error)
		old := d

		// Stale soft delete: nothing deleted, version unchanged.
		must(t, db.Model(&d).Update("title", "b").Error) // rev 2
		err := db.Delete(&old).Error
		checkErr(t, err, versioned.ErrStale)
		if old.Rev != 1 || old.DeletedAt.Valid {
			t.Fatalf("stale soft delete changed the struct: %+v", old)
		}
		var n int64
		must(t, db.Model(&Doc{}).Count(&n).Error)
		if n != 1 {
			t.Fatalf("stale soft delete hid the row")
		}

		// Fresh soft delete: deleted_at set and the version bumped, in the
		// database and in memory.
		must(t, db.Delete(&d).Error)
		if d.Rev != 3 || !d.DeletedAt.Valid {
			t.Fatalf("after soft delete: %+v, want rev 3 and deleted_at set", d)
		}
		var raw Doc
		must(t, db.Unscoped().First(&raw, d.ID).Error)
		if raw.Rev != 3 || !raw.DeletedAt.Valid {
			t.Fatalf("row after soft delete: %+v", raw)
		}
		// A writer holding the pre-delete version is stale.
		old = d
		old.Rev = 2
		checkErr(t, db.Unscoped().Model(&old).Update("title", "zombie").Error, versioned.ErrStale)
		// An update of the soft-deleted row at its current version matches
		// nothing (GORM's soft-delete filter) and is reported, not silent.
		checkErr(t, db.Model(&d).Update("title", "x").Error, versioned.ErrStale)
		// Restoring it deliberately: Unscoped lifts the soft-delete filter,
		// the version check stays.
		must(t, db.Unscoped().Model(&d).Update("deleted_at", nil).Error)
		if d.Rev != 4 {
			t.Fatalf("restore: rev %d, want 4", d.Rev)
		}
		// Hard delete with Unscoped is checked too.
		old = d
		old.Rev = 3
		checkErr(t, db.Unscoped().Delete(&old).Error, versioned.ErrStale)
		must(t, db.Unscoped().Delete(&d).Error)
		must(t, db.Unscoped().Model(&Doc{}).Count(&n).Error)
		if n != 0 {
			t.Fatalf("hard delete left %d rows", n)
		}
	})
}

func TestCreate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Order{}))
		a := Order{Status: "a"}
		must(t, db.Create(&a).Error)
		b := Order{Status: "b", Version: 7}
		must(t, db.Create(&b).Error)
		batch := []Order{{Status: "c"}, {Status: "d", Version: 5}}
		must(t, db.Create(&batch).Error)
		ptrs := []*Order{{Status: "e"}, {Status: "f"}}
		must(t, db.CreateInBatches(&ptrs, 1).Error)
		u := Order{Status: "g"}
		must(t, db.Unscoped().Create(&u).Error)
		must(t, db.Model(&Order{}).Create(map[string]any{"status": "h"}).Error)
		must(t, db.Model(&Order{}).Create(map[string]any{"status": "i"}).Error)
		must(t, db.Model(&Order{}).Create(map[string]any{"status": "j", "version": 9}).Error)
		s := Order{Status: "k"}
		must(t, db.Save(&s).Error) // a new record: Save creates

		mem := map[string]int64{"a": a.Version, "b": b.Version, "c": batch[0].Version, "d": batch[1].Version,
			"e": ptrs[0].Version, "f": ptrs[1].Version, "g": u.Version, "k": s.Version}
		want := map[string]int64{"a": 1, "b": 7, "c": 1, "d": 5, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "j": 9, "k": 1}
		for k, v := range mem {
			if want[k] != v {
				t.Errorf("in-memory version of %s = %d, want %d", k, v, want[k])
			}
		}
		var rows []Order
		must(t, db.Order("status").Find(&rows).Error)
		if len(rows) != len(want) {
			t.Fatalf("%d rows, want %d", len(rows), len(want))
		}
		for _, r := range rows {
			if r.Version != want[r.Status] {
				t.Errorf("row %s: version %d, want %d", r.Status, r.Version, want[r.Status])
			}
		}
	})
}

func TestUpsert(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Order{}))
		o := Order{Status: "new"}
		must(t, db.Create(&o).Error)
		must(t, db.Model(&o).Update("status", "newer").Error) // version 2
		stale := Order{ID: o.ID, Status: "stale", Version: 1}
		err := db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&stale).Error
		checkErr(t, err, sqlock.ErrUnsupported)
		// DO NOTHING is harmless and allowed.
		must(t, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&stale).Error)
		var got Order
		must(t, db.First(&got, o.ID).Error)
		if got.Status != "newer" || got.Version != 2 {
			t.Fatalf("row = %+v, want newer/2", got)
		}
		// The named opt-out lets a deliberate upsert through (on MySQL one
		// that names its columns: UpdateAll would copy the version).
		optOut := clause.OnConflict{UpdateAll: true}
		if db.Name() == "mysql" {
			checkErr(t, db.Scopes(gormplugin.SkipVersionCheck).Clauses(optOut).Create(&stale).Error, sqlock.ErrUnsupported)
			optOut = clause.OnConflict{DoUpdates: clause.AssignmentColumns([]string{"status"})}
		}
		must(t, db.Scopes(gormplugin.SkipVersionCheck).Clauses(optOut).Create(&stale).Error)
		must(t, db.First(&got, o.ID).Error)
		if got.Status != "stale" {
			t.Fatalf("opted-out upsert did not write: %+v", got)
		}
	})
}

type FloatVersion struct {
	ID      uint
	Version float64 `lock:"version"`
}

type TwoVersions struct {
	ID uint
	A  int `lock:"version"`
	B  int `lock:"version"`
}

type PtrVersion struct {
	ID      uint
	Version *int64 `lock:"version"`
}

type TypoVersion struct {
	ID      uint
	Version int64 `lock:"verison"`
}

type VersionBase struct {
	Version int64 `lock:"version"`
}

type EmbeddedPtrVersion struct {
	ID uint
	*VersionBase
}

func TestBadModels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		for _, m := range []any{&FloatVersion{}, &TwoVersions{}, &PtrVersion{}, &TypoVersion{}, &EmbeddedPtrVersion{}} {
			// AutoMigrate runs no write callbacks; the first write fails.
			must(t, db.AutoMigrate(m))
			err := db.Create(m).Error
			var te *versioned.TagError
			if !errors.Is(err, versioned.ErrInvalidModel) || !errors.As(err, &te) {
				t.Fatalf("%T: create error %v, want *versioned.TagError", m, err)
			}
			t.Logf("%T: %v", m, err)
			var n int64
			must(t, db.Model(m).Count(&n).Error)
			if n != 0 {
				t.Fatalf("%T: a row was written", m)
			}
			checkErr(t, db.Model(m).Where("id = 1").Update("id", 2).Error, versioned.ErrInvalidModel)
			checkErr(t, db.Where("id = 1").Delete(m).Error, versioned.ErrInvalidModel)
		}
	})
}

type Tiny struct {
	ID      uint
	N       int
	Version int8 `lock:"version"`
}

type UTiny struct {
	ID      uint
	N       int
	Version uint8 `lock:"version"`
}

func TestOverflow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Tiny{}, &UTiny{}))
		a := Tiny{N: 1, Version: 126}
		must(t, db.Create(&a).Error)
		must(t, db.Model(&a).Update("n", 2).Error) // 127: the largest int8
		err := db.Model(&a).Update("n", 3).Error
		var oe *versioned.OverflowError
		if !errors.As(err, &oe) || !errors.Is(err, versioned.ErrOverflow) {
			t.Fatalf("error %v, want *versioned.OverflowError", err)
		}
		var got Tiny
		must(t, db.First(&got, a.ID).Error)
		if got.N != 2 || got.Version != 127 || a.Version != 127 {
			t.Fatalf("overflowing update wrote: row %+v, struct %+v", got, a)
		}
		u := UTiny{N: 1, Version: 255}
		must(t, db.Create(&u).Error)
		checkErr(t, db.Model(&u).Update("n", 2).Error, versioned.ErrOverflow)
		checkErr(t, db.Save(&u).Error, versioned.ErrOverflow)
	})
}

func TestProbeAndObserver(t *testing.T) {
	rec := &observetest.Recorder{}
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		rec.Reset()
		must(t, db.AutoMigrate(&Order{}, &Doc{}))
		o := Order{Status: "new"}
		must(t, db.Create(&o).Error)
		old := o
		must(t, db.Model(&o).Update("status", "x").Error)
		must(t, db.Model(&o).Update("status", "y").Error)

		var se *versioned.StaleError
		err := db.Model(&old).Update("status", "z").Error
		if !errors.As(err, &se) || !rowChanged(se) || se.Current != 3 || se.Op != "update" {
			t.Fatalf("changed row: %v (%+v)", err, se)
		}
		must(t, db.Delete(&o).Error)
		err = db.Model(&o).Update("status", "z").Error
		if !errors.As(err, &se) || !se.Probed || !se.Gone {
			t.Fatalf("gone row: %v (%+v)", err, se)
		}
		err = db.Delete(&old).Error
		if !errors.As(err, &se) || !se.Gone || se.Op != "delete" {
			t.Fatalf("delete of gone row: %v (%+v)", err, se)
		}
		// A soft-deleted row at the expected version: another condition
		// (deleted_at IS NULL) failed.
		d := Doc{Title: "a"}
		must(t, db.Create(&d).Error)
		must(t, db.Delete(&d).Error)
		err = db.Model(&d).Update("title", "b").Error
		if !errors.As(err, &se) || !rowUnchanged(se) || se.Current != 2 {
			t.Fatalf("soft-deleted row: %v (%+v)", err, se)
		}
		events := rec.Events()
		if len(events) != 4 {
			t.Fatalf("%d stale events, want 4", len(events))
		}
		for _, e := range events {
			if e.Kind != observe.Stale || e.Source != "gormplugin" || !errors.Is(e.Err, versioned.ErrStale) || e.Table == "" {
				t.Fatalf("event %+v", e)
			}
		}
	}, gormplugin.WithProbe(), gormplugin.WithObserver(rec))
}

func TestNullVersion(t *testing.T) {
	t.Run("as-zero", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, db *gorm.DB) {
			must(t, db.AutoMigrate(&Order{}))
			must(t, db.Exec("INSERT INTO orders (status, amount, version) VALUES ('legacy', 0, NULL)").Error)
			var a, b Order
			must(t, db.First(&a, "status = ?", "legacy").Error)
			must(t, db.First(&b, "status = ?", "legacy").Error)
			if a.Version != 0 {
				t.Fatalf("NULL loaded as %d", a.Version)
			}
			must(t, db.Model(&a).Update("amount", 1).Error)
			if a.Version != 1 {
				t.Fatalf("after first write: version %d, want 1", a.Version)
			}
			// The second writer loaded the same NULL row: it lost.
			checkErr(t, db.Model(&b).Update("amount", 2).Error, versioned.ErrStale)
			// GORM does not reset a field when it scans NULL into a struct
			// that already holds a value: the reused struct keeps 5 and
			// its write is stale (loud, never silent); a fresh struct reads
			// 0 and wins. Re-read into a fresh value inside retry loops.
			b.Version = 5
			must(t, db.Exec("UPDATE orders SET version = NULL").Error)
			must(t, db.First(&b, b.ID).Error)
			checkErr(t, db.Model(&b).Update("amount", 2).Error, versioned.ErrStale)
			var c Order
			must(t, db.First(&c, b.ID).Error)
			if c.Version != 0 {
				t.Fatalf("a fresh read of a NULL version gave %d", c.Version)
			}
			must(t, db.Model(&c).Update("amount", 2).Error)
			must(t, db.Exec("UPDATE orders SET version = NULL").Error)
			// A batch write turns NULL into 1.
			must(t, db.Model(&Order{}).Where("status = ?", "legacy").Update("amount", 3).Error)
			must(t, db.First(&b, b.ID).Error)
			if b.Version != 1 {
				t.Fatalf("batch write left version %d, want 1", b.Version)
			}
		})
	})
	t.Run("refused", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, db *gorm.DB) {
			must(t, db.AutoMigrate(&Order{}))
			must(t, db.Exec("INSERT INTO orders (status, amount, version) VALUES ('legacy', 0, NULL)").Error)
			var a Order
			must(t, db.First(&a).Error)
			attempts := 0
			err := retry.Do(context.Background(), func(context.Context) error {
				attempts++
				return db.Model(&a).Update("amount", 1).Error
			}, retry.WithBackoff(retry.Constant(0)))
			var ne *gormplugin.NullVersionError
			if !errors.Is(err, gormplugin.ErrNullVersion) || !errors.As(err, &ne) || errors.Is(err, versioned.ErrStale) {
				t.Fatalf("error %v, want *NullVersionError", err)
			}
			if attempts != 1 {
				t.Fatalf("a NULL version was retried %d times", attempts)
			}
			t.Log(err)
			var got Order
			must(t, db.First(&got).Error)
			if got.Amount != 0 {
				t.Fatalf("refused write changed the row")
			}
		}, gormplugin.WithNullPolicy(gormplugin.NullRefused))
	})
}

// Hooked logs its hooks into an audit table through the hook's own
// transaction.
type Hooked struct {
	ID      uint
	Name    string
	Version int64 `lock:"version"`
	seen    []int64
}

type Audit struct {
	ID   uint
	Note string
}

func (h *Hooked) BeforeUpdate(tx *gorm.DB) error {
	h.seen = append(h.seen, h.Version)
	return tx.Create(&Audit{Note: "before"}).Error
}

func (h *Hooked) AfterUpdate(tx *gorm.DB) error {
	h.seen = append(h.seen, h.Version)
	return nil
}

func TestHooksAndRollback(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Hooked{}, &Audit{}))
		h := Hooked{Name: "a"}
		must(t, db.Create(&h).Error)
		must(t, db.Model(&h).Update("name", "b").Error)
		if len(h.seen) != 2 || h.seen[0] != 1 || h.seen[1] != 2 {
			t.Fatalf("hooks saw versions %v, want [1 2]", h.seen)
		}
		stale := Hooked{ID: h.ID, Name: "b", Version: 1}
		checkErr(t, db.Model(&stale).Update("name", "c").Error, versioned.ErrStale)
		if len(stale.seen) != 1 {
			t.Fatalf("AfterUpdate ran after a stale write: %v", stale.seen)
		}
		// The BeforeUpdate hook's insert ran in GORM's implicit
		// transaction, which the stale error rolled back.
		var n int64
		must(t, db.Model(&Audit{}).Count(&n).Error)
		if n != 1 {
			t.Fatalf("%d audit rows, want 1 (the stale write's must be rolled back)", n)
		}
		// UpdateColumn skips hooks but not the version check.
		checkErr(t, db.Model(&stale).UpdateColumn("name", "c").Error, versioned.ErrStale)
		must(t, db.Model(&h).UpdateColumn("name", "c").Error)
		if h.Version != 3 || len(h.seen) != 2 {
			t.Fatalf("UpdateColumn: version %d, hooks %v", h.Version, h.seen)
		}
	})
}

func TestUpdatedAt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Order{}))
		o := Order{Status: "new"}
		must(t, db.Create(&o).Error)
		old := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
		for i, update := range []func() error{
			func() error { return db.Model(&o).Update("status", "a").Error },
			func() error { return db.Model(&o).Updates(Order{Status: "b"}).Error },
			func() error { o.Status = "c"; return db.Save(&o).Error },
		} {
			must(t, db.Exec("UPDATE orders SET updated_at = ?", old).Error)
			must(t, update())
			var got Order
			must(t, db.First(&got, o.ID).Error)
			if !got.UpdatedAt.After(old.Add(time.Minute)) || got.Version != int64(i+2) {
				t.Fatalf("update %d: updated_at %v (was %v), version %d", i, got.UpdatedAt, old, got.Version)
			}
		}
	})
}

type Author struct {
	ID      uint
	Name    string
	Version int64 `lock:"version"`
	Books   []Book
}

type Book struct {
	ID       uint
	AuthorID uint
	Title    string
	Version  int64 `lock:"version"`
}

func TestAssociations(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Author{}, &Book{}))
		a := Author{Name: "a", Books: []Book{{Title: "x"}, {Title: "y"}}}
		must(t, db.Create(&a).Error)
		if a.Version != 1 || a.Books[0].Version != 1 || a.Books[1].Version != 1 {
			t.Fatalf("create with associations: %+v", a)
		}
		// Save of the parent with a new child: parent checked and bumped,
		// child created.
		a.Books = append(a.Books, Book{Title: "z"})
		a.Name = "b"
		must(t, db.Save(&a).Error)
		if a.Version != 2 || a.Books[2].Version != 1 || a.Books[2].ID == 0 {
			t.Fatalf("save with associations: %+v", a)
		}
		var got Author
		must(t, db.Preload("Books").First(&got, a.ID).Error)
		if got.Name != "b" || got.Version != 2 || len(got.Books) != 3 {
			t.Fatalf("reloaded: %+v", got)
		}
		// A stale parent write saves none of its associations.
		stale := got
		stale.Version = 1
		stale.Books = append(stale.Books, Book{Title: "w"})
		checkErr(t, db.Save(&stale).Error, versioned.ErrStale)
		var n int64
		must(t, db.Model(&Book{}).Count(&n).Error)
		if n != 3 {
			t.Fatalf("%d books after a stale save, want 3", n)
		}
		// Association mode still works.
		must(t, db.Model(&got).Association("Books").Append(&Book{Title: "v"}))
		must(t, db.Model(&Book{}).Count(&n).Error)
		if n != 4 {
			t.Fatalf("%d books after Append, want 4", n)
		}
		// A child is versioned on its own.
		b := got.Books[0]
		must(t, db.Model(&b).Update("title", "x2").Error)
		if b.Version != 2 {
			t.Fatalf("child version %d", b.Version)
		}
	})
}

func TestGenerics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		must(t, db.AutoMigrate(&Order{}))
		g := gorm.G[Order](db)
		o := Order{Status: "new"}
		must(t, g.Create(ctx, &o))
		if o.Version != 1 {
			t.Fatalf("generic create: version %d", o.Version)
		}
		// Updates with a value: checked against the value's version (the
		// caller's copy cannot be bumped: it is a value).
		n, err := g.Where("id = ?", o.ID).Updates(ctx, Order{ID: o.ID, Status: "a", Version: 1})
		if err != nil || n != 1 {
			t.Fatalf("generic Updates: %d, %v", n, err)
		}
		_, err = g.Where("id = ?", o.ID).Updates(ctx, Order{ID: o.ID, Status: "b", Version: 1})
		checkErr(t, err, versioned.ErrStale)
		// Update by condition: a batch write, bumped without a check.
		n, err = g.Where("id = ?", o.ID).Update(ctx, "status", "c")
		if err != nil || n != 1 {
			t.Fatalf("generic Update: %d, %v", n, err)
		}
		got, err := g.Where("id = ?", o.ID).First(ctx)
		must(t, err)
		if got.Status != "c" || got.Version != 3 {
			t.Fatalf("after generic writes: %+v", got)
		}
		// Updates without a version and without a key: batch.
		_, err = g.Where("id = ?", o.ID).Updates(ctx, Order{Status: "d"})
		must(t, err)
		// Updates with a version but no key: refused.
		_, err = g.Where("id = ?", o.ID).Updates(ctx, Order{Status: "e", Version: 4})
		checkErr(t, err, versioned.ErrNoKey)
		n, err = g.Where("id = ?", o.ID).Delete(ctx)
		if err != nil || n != 1 {
			t.Fatalf("generic Delete: %d, %v", n, err)
		}
	})
}

type Loose struct {
	ID      uint
	Version int64 `lock:"version"`
	Note    string
}

func TestKeyNotUnique(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		// A table whose "primary key" is not unique in the database.
		must(t, db.Exec("CREATE TABLE looses (id bigint, version bigint, note text)").Error)
		must(t, db.Exec("INSERT INTO looses VALUES (1, 1, 'a'), (1, 1, 'b')").Error)
		l := Loose{ID: 1, Version: 1}
		err := db.Model(&l).Update("note", "c").Error
		var re *versioned.RowsError
		if !errors.Is(err, versioned.ErrKeyNotUnique) || !errors.As(err, &re) || re.Rows != 2 {
			t.Fatalf("error %v, want *versioned.RowsError", err)
		}
		var n int64
		must(t, db.Raw("SELECT count(*) FROM looses WHERE note = 'c'").Scan(&n).Error)
		if n != 0 || l.Version != 1 {
			t.Fatalf("the write was not rolled back (%d rows, version %d)", n, l.Version)
		}
	})
}

// Note embeds gorm.Model (ID, timestamps, soft delete) beside a uint32
// version.
type Note struct {
	gorm.Model
	Body    string
	Version uint32 `lock:"version"`
}

func TestEmbeddedGormModel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Note{}))
		n := Note{Body: "a"}
		must(t, db.Create(&n).Error)
		old := n
		n.Body = "b"
		must(t, db.Updates(&n).Error)
		if n.Version != 2 {
			t.Fatalf("version %d, want 2", n.Version)
		}
		old.Body = "stale"
		checkErr(t, db.Updates(&old).Error, versioned.ErrStale)
		checkErr(t, db.Delete(&old).Error, versioned.ErrStale)
		must(t, db.Delete(&n).Error)
		var got Note
		must(t, db.Unscoped().First(&got, n.ID).Error)
		if got.Body != "b" || got.Version != 3 || !got.DeletedAt.Valid {
			t.Fatalf("row %+v", got)
		}
	})
}

func TestUserSetAndReturning(t *testing.T) {
	forEachReturningBackend(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Order{}))
		o := Order{Status: "new"}
		must(t, db.Create(&o).Error)
		for range 2 {
			must(t, db.Create(&Order{Status: "other"}).Error)
		}
		old := o

		// A SET clause of the caller's own: the plugin adds the key, the
		// check and the bump, and drops a version assignment.
		set := clause.Set{{Column: clause.Column{Name: "status"}, Value: "set"}, {Column: clause.Column{Name: "version"}, Value: 50}}
		must(t, db.Model(&o).Clauses(set).Updates(map[string]any{}).Error)
		checkErr(t, db.Model(&old).Clauses(set).Updates(map[string]any{}).Error, versioned.ErrStale)
		if o.Version != 2 || old.Version != 1 {
			t.Fatalf("versions %d, %d", o.Version, old.Version)
		}

		// RETURNING scans the row back; the version agrees.
		must(t, db.Model(&o).Clauses(clause.Returning{}).Update("status", "ret").Error)
		checkErr(t, db.Model(&old).Clauses(clause.Returning{}).Update("status", "ret").Error, versioned.ErrStale)
		var got Order
		must(t, db.First(&got, o.ID).Error)
		if got.Status != "ret" || got.Version != 3 || o.Version != 3 {
			t.Fatalf("row %+v, struct version %d", got, o.Version)
		}
		var others int64
		must(t, db.Model(&Order{}).Where("status = ? AND version = 1", "other").Count(&others).Error)
		if others != 2 {
			t.Fatalf("bystanders changed")
		}
	})
}

func TestWithObserverSlogLogsStaleWrites(t *testing.T) {
	var buf syncBuffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	db := openSQLite(t, gormplugin.WithObserver(observe.Slog(l)))
	must(t, db.AutoMigrate(&Order{}))
	o := Order{Status: "new"}
	must(t, db.Create(&o).Error)
	old := o
	must(t, db.Model(&o).Update("status", "a").Error)
	if buf.String() != "" {
		t.Fatalf("logged without a conflict: %s", buf.String())
	}
	checkErr(t, db.Model(&old).Update("status", "b").Error, versioned.ErrStale)
	out := buf.String()
	for _, want := range []string{"sqlock stale", "source=gormplugin", "table=orders", "stale version"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log %q lacks %q", out, want)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
