package gormplugin_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/versioned"
)

type Order struct {
	ID        uint
	Status    string
	Amount    int64
	Version   int64 `lock:"version"`
	UpdatedAt time.Time
}

const (
	rowGone = -1 // the case's row is deleted before it runs
	rowNull = -2 // the case's row has a NULL version before it runs
)

type writeCase struct {
	name   string
	dbVer  int64 // the row's version in the database when the case runs (or rowGone/rowNull)
	memVer int64 // the version in the struct the case writes with
	noKey  bool  // the struct has no primary key value
	run    func(db *gorm.DB, o *Order) error

	wantErr    error
	wantGone   bool   // the row is gone afterwards
	wantStatus string // the row's status afterwards
	wantVer    int64  // the row's version afterwards
	wantAmount int64  // the row's amount afterwards (0: 10, unchanged)
	wantMem    int64  // the struct's version afterwards
	othersVer  int64  // the version of the two bystander rows afterwards (0: 1, unchanged)
	othersAmt  int64  // their amount (0: 10)
	rows       int64  // rows in the table afterwards (0: 3)
}

// fresh and stale build the two variants of a write: the struct was loaded
// at the row's current version, or one behind.
func fresh(name string, run func(db *gorm.DB, o *Order) error, status string) writeCase {
	return writeCase{name: name, dbVer: 1, memVer: 1, run: run, wantStatus: status, wantVer: 2, wantMem: 2}
}

func stale(name string, run func(db *gorm.DB, o *Order) error) writeCase {
	return writeCase{name: name + "/stale", dbVer: 2, memVer: 1, run: run, wantErr: versioned.ErrStale,
		wantStatus: "new", wantVer: 2, wantMem: 1}
}

func both(name string, run func(db *gorm.DB, o *Order) error, status string) []writeCase {
	return []writeCase{fresh(name, run, status), stale(name, run)}
}

func writeCases() []writeCase {
	var cs []writeCase
	add := func(c ...writeCase) { cs = append(cs, c...) }

	add(both("Update", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, "paid")...)
	add(both("Updates/map", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Updates(map[string]any{"status": "paid"}).Error
	}, "paid")...)
	add(both("Updates/struct", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Updates(Order{Status: "paid"}).Error
	}, "paid")...)
	add(both("Updates/self", func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Updates(o).Error
	}, "paid")...)
	add(both("UpdateColumn", func(db *gorm.DB, o *Order) error {
		return db.Model(o).UpdateColumn("status", "paid").Error
	}, "paid")...)
	add(both("UpdateColumns/map", func(db *gorm.DB, o *Order) error {
		return db.Model(o).UpdateColumns(map[string]any{"status": "paid"}).Error
	}, "paid")...)
	add(both("UpdateColumns/struct", func(db *gorm.DB, o *Order) error {
		return db.Model(o).UpdateColumns(Order{Status: "paid"}).Error
	}, "paid")...)
	add(both("Select", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Select("status").Updates(map[string]any{"status": "paid", "amount": 99}).Error
	}, "paid")...)
	add(both("Select/struct", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Select("status").Updates(Order{Status: "paid", Amount: 99}).Error
	}, "paid")...)
	add(both("Omit/version", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Omit("version").Updates(map[string]any{"status": "paid"}).Error
	}, "paid")...)
	add(both("Select/version", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Select("status", "version").Updates(Order{Status: "paid", Version: 99}).Error
	}, "paid")...)
	add(both("Updates/map-version-ignored", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Updates(map[string]any{"status": "paid", "version": 99}).Error
	}, "paid")...)
	add(both("Updates/struct-version-ignored", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Updates(Order{Status: "paid", Version: 99}).Error
	}, "paid")...)
	add(both("Update/version-only-touches", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("version", 99).Error
	}, "new")...)
	expr := fresh("Update/expr", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("amount", gorm.Expr("amount + ?", 5)).Error
	}, "new")
	expr.wantAmount = 15
	add(expr)
	sel := fresh("Select/amount-not-written", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Select("status").Updates(map[string]any{"status": "paid", "amount": 99}).Error
	}, "paid")
	add(sel)
	add(both("Save", func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Save(o).Error
	}, "paid")...)
	add(both("Save/select-star", func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Select("*").Save(o).Error
	}, "paid")...)
	add(writeCase{name: "Save/gone-no-upsert", dbVer: rowGone, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Save(o).Error
	}, wantErr: versioned.ErrStale, wantGone: true, wantMem: 1, rows: 2})
	add(writeCase{name: "Update/gone", dbVer: rowGone, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, wantErr: versioned.ErrStale, wantGone: true, wantMem: 1, rows: 2})
	add(writeCase{name: "Delete", dbVer: 1, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(o).Error
	}, wantGone: true, wantMem: 1, rows: 2})
	add(writeCase{name: "Delete/stale", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(o).Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 2, wantMem: 1})
	add(writeCase{name: "Delete/batch-by-id-unchecked", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(&Order{}, o.ID).Error
	}, wantGone: true, wantMem: 1, rows: 2})
	add(writeCase{name: "Update/no-key", dbVer: 1, memVer: 1, noKey: true, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, wantErr: versioned.ErrNoKey, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Updates/no-key", dbVer: 1, memVer: 1, noKey: true, run: func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Updates(o).Error
	}, wantErr: versioned.ErrNoKey, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Delete/no-key", dbVer: 1, memVer: 1, noKey: true, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(o).Error
	}, wantErr: versioned.ErrNoKey, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Or/single", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Or("status = ?", "other").Update("amount", 7).Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 2, wantMem: 1})
	add(writeCase{name: "Or/where-or", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Where("status = ?", "new").Or("status = ?", "other").Update("amount", 7).Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 2, wantMem: 1})
	orFresh := fresh("Or/where-or", func(db *gorm.DB, o *Order) error {
		return db.Model(o).Where("status = ?", "new").Or("status = ?", "other").Update("amount", 7).Error
	}, "new")
	orFresh.wantAmount = 7
	add(orFresh)
	add(writeCase{name: "Or/raw-or", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Where("status = ? OR status = ?", "new", "other").Update("amount", 7).Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 2, wantMem: 1})
	add(writeCase{name: "Batch/update-bumps-unchecked", dbVer: 2, memVer: 1, run: func(db *gorm.DB, _ *Order) error {
		return db.Model(&Order{}).Where("status = ?", "other").Update("amount", 7).Error
	}, wantStatus: "new", wantVer: 2, wantMem: 1, othersVer: 2, othersAmt: 7})
	add(writeCase{name: "Batch/map-version-ignored", dbVer: 2, memVer: 1, run: func(db *gorm.DB, _ *Order) error {
		return db.Model(&Order{}).Where("status = ?", "other").Updates(map[string]any{"amount": 7, "version": 50}).Error
	}, wantStatus: "new", wantVer: 2, wantMem: 1, othersVer: 2, othersAmt: 7})
	add(writeCase{name: "Batch/no-where-refused-by-gorm", dbVer: 1, memVer: 1, run: func(db *gorm.DB, _ *Order) error {
		return db.Model(&Order{}).Update("amount", 7).Error
	}, wantErr: gorm.ErrMissingWhereClause, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Slice/update", dbVer: 1, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(&[]Order{*o}).Update("status", "paid").Error
	}, wantErr: sqlock.ErrUnsupported, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Slice/delete", dbVer: 1, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(&[]Order{*o}).Error
	}, wantErr: sqlock.ErrUnsupported, wantStatus: "new", wantVer: 1, wantMem: 1})
	add(writeCase{name: "Slice/save-upsert", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Save(&[]Order{*o}).Error
	}, wantErr: sqlock.ErrUnsupported, wantStatus: "new", wantVer: 2, wantMem: 1})
	add(writeCase{name: "SkipVersionCheck/scope", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Scopes(gormplugin.SkipVersionCheck).Model(o).Update("status", "paid").Error
	}, wantStatus: "paid", wantVer: 3, wantMem: 1})
	add(writeCase{name: "SkipVersionCheck/save", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		o.Status = "paid"
		return db.Scopes(gormplugin.SkipVersionCheck).Save(o).Error
	}, wantStatus: "paid", wantVer: 3, wantMem: 1})
	add(writeCase{name: "SkipVersionCheck/one-statement-only", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		if err := db.Scopes(gormplugin.SkipVersionCheck).Model(&Order{}).Where("status = ?", "other").Update("amount", 7).Error; err != nil {
			return err
		}
		return db.Model(o).Update("status", "paid").Error // a new chain: checked again
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 2, wantMem: 1, othersVer: 2, othersAmt: 7})
	add(writeCase{name: "SkipVersionCheck/delete", dbVer: 2, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Scopes(gormplugin.SkipVersionCheck).Delete(o).Error
	}, wantGone: true, wantMem: 1, rows: 2})
	add(stale("Unscoped-is-not-an-opt-out", func(db *gorm.DB, o *Order) error {
		return db.Unscoped().Model(o).Update("status", "paid").Error
	}))
	add(writeCase{name: "NonAddressable", dbVer: 1, memVer: 1, run: func(db *gorm.DB, o *Order) error {
		return db.Model(*o).Update("status", "paid").Error
	}, wantStatus: "paid", wantVer: 2, wantMem: 1})
	add(stale("NonAddressable", func(db *gorm.DB, o *Order) error {
		return db.Model(*o).Update("status", "paid").Error
	}))
	seq := fresh("Sequential", func(db *gorm.DB, o *Order) error {
		if err := db.Model(o).Update("status", "a").Error; err != nil {
			return err
		}
		return db.Model(o).Update("status", "paid").Error
	}, "paid")
	seq.wantVer, seq.wantMem = 3, 3
	add(seq)
	tx := fresh("Transaction", func(db *gorm.DB, o *Order) error {
		return db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Model(o).Update("amount", 11).Error; err != nil {
				return err
			}
			return tx.Model(o).Update("status", "paid").Error
		})
	}, "paid")
	tx.wantVer, tx.wantMem, tx.wantAmount = 3, 3, 11
	add(tx)
	add(stale("Transaction", func(db *gorm.DB, o *Order) error {
		return db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Model(&Order{}).Where("status = ?", "other").Update("amount", 7).Error; err != nil {
				return err
			}
			return tx.Model(o).Update("status", "paid").Error // stale: the whole transaction rolls back
		})
	}))
	add(writeCase{name: "NULL/update-sets-1", dbVer: rowNull, memVer: 0, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, wantStatus: "paid", wantVer: 1, wantMem: 1})
	add(writeCase{name: "NULL/stale-when-known-version", dbVer: rowNull, memVer: 3, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: rowNull, wantMem: 3})
	add(writeCase{name: "NULL/delete", dbVer: rowNull, memVer: 0, run: func(db *gorm.DB, o *Order) error {
		return db.Delete(o).Error
	}, wantGone: true, rows: 2})
	add(writeCase{name: "Zero/stale-against-real-version", dbVer: 1, memVer: 0, run: func(db *gorm.DB, o *Order) error {
		return db.Model(o).Update("status", "paid").Error
	}, wantErr: versioned.ErrStale, wantStatus: "new", wantVer: 1, wantMem: 0})
	return cs
}

// TestWriteMatrix runs every GORM write path on a versioned model against
// PostgreSQL, SQLite and MariaDB, asserting the error, the row in the database
// (and the two bystander rows) and the struct's version.
func TestWriteMatrix(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			db := be.open(t)
			must(t, db.AutoMigrate(&Order{}))
			for _, c := range writeCases() {
				t.Run(c.name, func(t *testing.T) { runWriteCase(t, db, c) })
			}
		})
	}
}

func runWriteCase(t *testing.T, db *gorm.DB, c writeCase) {
	must(t, db.Exec("DELETE FROM orders").Error)
	// Setup without the plugin's involvement beyond Create (version 1).
	row := Order{Status: "new", Amount: 10}
	must(t, db.Create(&row).Error)
	if row.Version != 1 {
		t.Fatalf("create: version %d, want 1", row.Version)
	}
	for range 2 {
		must(t, db.Create(&Order{Status: "other", Amount: 10}).Error)
	}
	switch c.dbVer {
	case rowGone:
		must(t, db.Exec("DELETE FROM orders WHERE id = ?", row.ID).Error)
	case rowNull:
		must(t, db.Exec("UPDATE orders SET version = NULL WHERE id = ?", row.ID).Error)
	default:
		must(t, db.Exec("UPDATE orders SET version = ? WHERE id = ?", c.dbVer, row.ID).Error)
	}
	o := row
	o.Version = c.memVer
	if c.noKey {
		o.ID = 0
	}
	log := &sqlLog{}
	err := c.run(db.Session(&gorm.Session{Logger: log}), &o)
	checkErr(t, err, c.wantErr)
	if c.wantErr == versioned.ErrStale {
		var se *versioned.StaleError
		if !errors.As(err, &se) || se.Table != "orders" || se.Expected != c.memVer || fmt.Sprint(se.Key) != fmt.Sprint(row.ID) {
			t.Fatalf("stale error %#v: want table orders, key %d, expected %d", se, row.ID, c.memVer)
		}
	}
	if log.contains("INSERT") {
		t.Fatalf("the write inserted: %q", log.all())
	}
	if o.Version != c.wantMem {
		t.Errorf("in-memory version = %d, want %d", o.Version, c.wantMem)
	}

	var got struct {
		Status  string
		Amount  int64
		Version sql.NullInt64
	}
	res := db.Raw("SELECT status, amount, version FROM orders WHERE id = ?", row.ID).Scan(&got)
	must(t, res.Error)
	switch {
	case c.wantGone:
		if res.RowsAffected != 0 {
			t.Errorf("row still there: %+v", got)
		}
	case res.RowsAffected != 1:
		t.Errorf("row gone")
	default:
		if got.Status != c.wantStatus {
			t.Errorf("status = %q, want %q", got.Status, c.wantStatus)
		}
		wantVer := sql.NullInt64{Int64: c.wantVer, Valid: true}
		if c.wantVer == rowNull {
			wantVer = sql.NullInt64{}
		}
		if got.Version != wantVer {
			t.Errorf("version = %+v, want %+v", got.Version, wantVer)
		}
		wantAmt := c.wantAmount
		if wantAmt == 0 {
			wantAmt = 10
		}
		if got.Amount != wantAmt {
			t.Errorf("amount = %d, want %d", got.Amount, wantAmt)
		}
	}
	var others []struct {
		Status  string
		Amount  int64
		Version int64
	}
	must(t, db.Raw("SELECT status, amount, version FROM orders WHERE id <> ?", row.ID).Scan(&others).Error)
	wantOV, wantOA := max(c.othersVer, 1), c.othersAmt
	if wantOA == 0 {
		wantOA = 10
	}
	for _, x := range others {
		if x.Status != "other" || x.Version != wantOV || x.Amount != wantOA {
			t.Errorf("bystander row changed: %+v, want other/amount %d/version %d", x, wantOA, wantOV)
		}
	}
	wantRows := c.rows
	if wantRows == 0 {
		wantRows = 3
	}
	var n int64
	must(t, db.Model(&Order{}).Count(&n).Error)
	if n != wantRows {
		t.Errorf("rows = %d, want %d", n, wantRows)
	}
}
