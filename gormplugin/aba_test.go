package gormplugin_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock/versioned"
)

// hardSeat has no soft-delete field: Delete removes the row.
type hardSeat struct {
	ID     uint
	Holder string
	Rev    int64 `lock:"version"`
}

// softSeat keeps a deleted row as a tombstone (gorm.DeletedAt).
type softSeat struct {
	ID        uint
	Holder    string
	Rev       int64 `lock:"version"`
	DeletedAt gorm.DeletedAt
}

// The limit (docs/versioned.md, "Delete and re-insert"), exactly: a hard
// Delete forgets the version, Create of the same primary key starts it
// again at 1, and a copy read before the delete at version 1 writes the
// new row with no error.
func TestHardDeleteAndCreateLetACopyReadBeforeTheDeleteWrite(t *testing.T) {
	db := openPostgres(t)
	must(t, db.AutoMigrate(&hardSeat{}))
	s := hardSeat{Holder: "ann"}
	must(t, db.Create(&s).Error)
	stale := s // rev 1, read by a slow client
	must(t, db.Model(&s).Update("holder", "ann+1").Error)
	must(t, db.Delete(&s).Error)
	again := hardSeat{ID: s.ID, Holder: "bob"}
	must(t, db.Create(&again).Error)
	if again.Rev != 1 {
		t.Fatalf("re-created at rev %d, want 1", again.Rev)
	}
	if err := db.Model(&stale).Update("holder", "zombie").Error; err != nil {
		t.Fatalf("the limit has changed (update docs/versioned.md): the copy read before the delete got %v", err)
	}
	var got hardSeat
	must(t, db.First(&got, s.ID).Error)
	if got.Holder != "zombie" || got.Rev != 2 {
		t.Fatalf("row %+v, want bob's seat overwritten by the copy read before the delete", got)
	}
}

// The cure with GORM: gorm.DeletedAt. The soft delete bumps the version,
// the tombstone keeps the key (Create of it fails), restoring it is a
// versioned write that bumps it again: every copy read before the delete
// is ErrStale.
func TestSoftDeleteTombstoneMakesACopyReadBeforeTheDeleteStale(t *testing.T) {
	db := openPostgres(t)
	must(t, db.AutoMigrate(&softSeat{}))
	s := softSeat{Holder: "ann"}
	must(t, db.Create(&s).Error)
	older := s
	must(t, db.Model(&s).Update("holder", "ann+1").Error)
	atDelete := s
	must(t, db.Delete(&s).Error) // rev 3, deleted_at set
	if err := db.Create(&softSeat{ID: s.ID, Holder: "bob"}).Error; err == nil || errors.Is(err, versioned.ErrStale) {
		t.Fatalf("Create over the tombstone: %v, want the database's duplicate-key error", err)
	}
	must(t, db.Unscoped().Model(&s).Updates(map[string]any{"deleted_at": nil, "holder": "bob"}).Error)
	if s.Rev != 4 {
		t.Fatalf("restored at rev %d, want 4", s.Rev)
	}
	for _, cp := range []softSeat{older, atDelete} {
		rev := cp.Rev
		checkErr(t, db.Model(&cp).Update("holder", "zombie").Error, versioned.ErrStale)
		checkErr(t, db.Unscoped().Model(&cp).Update("holder", "zombie").Error, versioned.ErrStale)
		if cp.Rev != rev {
			t.Fatalf("stale copy's rev moved %d → %d", rev, cp.Rev)
		}
	}
	var got softSeat
	must(t, db.First(&got, s.ID).Error)
	if got.Holder != "bob" || got.Rev != 4 {
		t.Fatalf("row %+v, want bob's restored seat at rev 4", got)
	}
}
