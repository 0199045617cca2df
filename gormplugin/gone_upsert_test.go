package gormplugin_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock/versioned"
)

// TestRefusedUpsertOfGoneRowChangesNothing: a checked upsert of a loaded
// copy (version > 0) whose row was deleted is refused stale ("row is
// gone") and the row stays gone — without GORM's implicit transaction
// (SkipDefaultTransaction, with and without PrepareStmt), and inside the
// caller's own transaction when fn goes on after the error and commits.
// The same upsert of a row that is there still updates it and holds.
func TestRefusedUpsertOfGoneRowChangesNothing(t *testing.T) {
	sessions := []struct {
		name string
		s    *gorm.Session
	}{
		{"SkipDefaultTransaction", &gorm.Session{SkipDefaultTransaction: true}},
		{"SkipDefaultTransaction+PrepareStmt", &gorm.Session{SkipDefaultTransaction: true, PrepareStmt: true}},
		{"default", &gorm.Session{}},
	}
	forEachUpsertBackend(t, func(t *testing.T, base *gorm.DB) {
		must(t, base.AutoMigrate(&Order{}))
		for _, s := range sessions {
			t.Run(s.name, func(t *testing.T) {
				db := base.Session(s.s)
				gone := newOrder(t, db, 2)
				must(t, db.Exec("DELETE FROM orders WHERE id = ?", gone.ID).Error)
				gone.Status = "recreated"
				err := checkedUpsert(db).Create(&gone).Error
				var se *versioned.StaleError
				if !errors.As(err, &se) || !se.Gone || gone.Version != 2 {
					t.Fatalf("upsert of a gone row: %v, struct at %d", err, gone.Version)
				}
				if _, _, found := rowOf(t, db, gone.ID); found {
					t.Fatal("the refused upsert recreated the row")
				}

				// Inside the caller's transaction, fn carries on and commits.
				gone2 := newOrder(t, db, 3)
				must(t, db.Exec("DELETE FROM orders WHERE id = ?", gone2.ID).Error)
				live := newOrder(t, db, 4)
				live.Status = "upserted"
				must(t, db.Transaction(func(tx *gorm.DB) error {
					checkErr(t, checkedUpsert(tx).Create(&gone2).Error, versioned.ErrStale)
					// The transaction is still usable (on PostgreSQL too).
					return checkedUpsert(tx).Create(&live).Error
				}))
				if _, _, found := rowOf(t, db, gone2.ID); found {
					t.Fatal("the refused upsert inside a transaction recreated the row")
				}
				if v, st, _ := rowOf(t, db, live.ID); v != 5 || st != "upserted" || live.Version != 5 {
					t.Fatalf("upsert of a live row in the transaction: row %s/%d, struct %d; want upserted/5/5", st, v, live.Version)
				}

				// Outside a transaction, a live row's upsert holds.
				live.Status = "again"
				must(t, checkedUpsert(db).Create(&live).Error)
				if v, st, _ := rowOf(t, db, live.ID); v != 6 || st != "again" || live.Version != 6 {
					t.Fatalf("upsert of a live row: row %s/%d, struct %d; want again/6/6", st, v, live.Version)
				}
				// A new struct (version 0) still inserts.
				n := Order{Status: "inserted"}
				must(t, checkedUpsert(db).Create(&n).Error)
				if v, st, found := rowOf(t, db, n.ID); !found || v != 1 || st != "inserted" || n.Version != 1 {
					t.Fatalf("upsert of a new struct: row %v %s/%d, struct %d", found, st, v, n.Version)
				}
			})
		}
	})
}
