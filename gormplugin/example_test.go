package gormplugin_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/retry"
	"github.com/sqlock/sqlock/versioned"
)

type Ticket struct {
	ID      uint
	Status  string
	Version int64 `gorm:"not null;default:1" lock:"version"`
}

// exampleDB opens an in-memory SQLite database with the plugin installed.
func exampleDB(opts ...gormplugin.Option) *gorm.DB {
	db, err := gorm.Open(sqlite.Open(":memory:"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(1) // one connection: one in-memory database
	if err := db.Use(gormplugin.New(opts...)); err != nil {
		panic(err)
	}
	if err := db.AutoMigrate(&Ticket{}); err != nil {
		panic(err)
	}
	return db
}

func Example() {
	db := exampleDB()

	t := Ticket{Status: "open"}
	db.Create(&t)
	fmt.Println("created at version", t.Version)

	alice, bob := t, t // two requests loaded the same row

	err := db.Model(&alice).Update("status", "assigned").Error
	fmt.Println("alice:", err, "- now at version", alice.Version)

	err = db.Model(&bob).Update("status", "closed").Error
	fmt.Println("bob stale:", errors.Is(err, versioned.ErrStale), "- still at version", bob.Version)

	var row Ticket
	db.First(&row, t.ID)
	fmt.Println("row:", row.Status, row.Version)
	// Output:
	// created at version 1
	// alice: <nil> - now at version 2
	// bob stale: true - still at version 1
	// row: assigned 2
}

// A stale Save writes nothing: no fallback INSERT, no upsert over the
// newer row.
func Example_save() {
	db := exampleDB()
	t := Ticket{Status: "open"}
	db.Create(&t)
	old := t
	t.Status = "closed"
	fmt.Println(db.Save(&t).Error, t.Version)

	old.Status = "reopened"
	err := db.Save(&old).Error
	var se *versioned.StaleError
	fmt.Println(errors.As(err, &se), se.Table, se.Key, se.Expected)

	var n int64
	db.Model(&Ticket{}).Count(&n)
	var row Ticket
	db.First(&row)
	fmt.Println(n, row.Status, row.Version)
	// Output:
	// <nil> 2
	// true tickets 1 1
	// 1 closed 2
}

// Read, modify and write inside retry.Do: a stale write is retried with a
// fresh read.
func Example_retry() {
	db := exampleDB()
	db.Create(&Ticket{Status: "open"})
	ctx := context.Background()

	attempts := 0
	err := retry.Do(ctx, func(ctx context.Context) error {
		attempts++
		var t Ticket // a fresh struct on every attempt
		if err := db.WithContext(ctx).First(&t).Error; err != nil {
			return err
		}
		if attempts == 1 {
			// Someone else writes between our read and our write.
			db.Exec("UPDATE tickets SET version = version + 1")
		}
		return db.WithContext(ctx).Model(&t).Update("status", "closed").Error
	})
	fmt.Println(err, attempts)
	// Output: <nil> 2
}

// WithProbe tells a row that changed from one that is gone, with one
// SELECT after the conflict.
func ExampleWithProbe() {
	db := exampleDB(gormplugin.WithProbe())
	t := Ticket{Status: "open"}
	db.Create(&t)
	old := t
	db.Model(&t).Update("status", "assigned")

	var se *versioned.StaleError
	errors.As(db.Model(&old).Update("status", "closed").Error, &se)
	fmt.Println(se.Gone, se.Current)

	db.Delete(&t)
	errors.As(db.Model(&t).Update("status", "closed").Error, &se)
	fmt.Println(se.Gone)
	// Output:
	// false 2
	// true
}

// SkipVersionCheck makes one statement a deliberate blind write; the
// version is still bumped so other writers notice.
func ExampleSkipVersionCheck() {
	db := exampleDB()
	t := Ticket{Status: "open"}
	db.Create(&t)
	old := t
	db.Model(&t).Update("status", "assigned")

	err := db.Scopes(gormplugin.SkipVersionCheck).Model(&old).Update("status", "void").Error
	var row Ticket
	db.First(&row)
	fmt.Println(err, row.Status, row.Version)
	// Output: <nil> void 3
}

// A struct with a version but no primary key is refused, never widened to
// every row with that version; a model without key and version is a batch
// write that bumps every matched row.
func Example_batch() {
	db := exampleDB()
	db.Create(&[]Ticket{{Status: "open"}, {Status: "open"}})

	err := db.Model(&Ticket{Version: 1}).Update("status", "x").Error
	fmt.Println(errors.Is(err, versioned.ErrNoKey))

	res := db.Model(&Ticket{}).Where("status = ?", "open").Update("status", "triaged")
	var versions []int64
	db.Model(&Ticket{}).Order("id").Pluck("version", &versions)
	fmt.Println(res.Error, res.RowsAffected, versions)
	// Output:
	// true
	// <nil> 2 [2 2]
}

// The plugin cannot see the caller's own transaction roll back: after a
// versioned write inside db.Transaction whose fn then fails, the struct
// holds a version the row never kept. Resync reads it back.
func ExampleResync() {
	db := exampleDB()
	t := Ticket{Status: "open"}
	db.Create(&t)

	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&t).Update("status", "assigned").Error; err != nil {
			return err
		}
		return errors.New("the payment provider refused") // rolls the update back
	})
	fmt.Println(err, "- struct at version", t.Version)

	if err := gormplugin.Resync(db, &t); err != nil {
		panic(err)
	}
	fmt.Println("after Resync: version", t.Version)
	fmt.Println("the next write:", db.Model(&t).Update("status", "assigned").Error, t.Version)
	// Output:
	// the payment provider refused - struct at version 2
	// after Resync: version 1
	// the next write: <nil> 2
}

// Crate is a fenced model: Fence receives the fencing token of the lock
// holder that wrote the row.
type Crate struct {
	ID      uint
	Place   string
	Version int64 `gorm:"not null;default:1" lock:"version"`
	Fence   int64 `lock:"fence"`
}

// A model with a lock:"fence" field is written only under a lock: the
// token comes from the statement's context (here leases' tokens 7 and 8).
// After the holder with token 8 has written the row, the holder with
// token 7 — paused past its lease, say — is refused by the row itself.
func Example_fenced() {
	db := exampleDB()
	if err := db.AutoMigrate(&Crate{}); err != nil {
		panic(err)
	}
	c := Crate{Place: "dock"}
	db.Create(&c)
	paused := c // the old holder read the row before its lease ran out

	ctx := context.Background()
	newHolder := db.WithContext(sqlock.WithFencingToken(ctx, 8)) // l.Token() of the new lease
	err := newHolder.Model(&c).Update("place", "truck").Error
	fmt.Println("new holder:", err, "- fence", c.Fence)

	oldHolder := db.WithContext(sqlock.WithFencingToken(ctx, 7))
	err = oldHolder.Model(&paused).Update("place", "ship").Error
	fmt.Println("old holder fenced:", errors.Is(err, versioned.ErrFenced), "stale:", errors.Is(err, versioned.ErrStale))

	err = db.Model(&c).Update("place", "ship").Error // no token in the context
	fmt.Println("no token:", errors.Is(err, versioned.ErrInvalidArg))
	// Output:
	// new holder: <nil> - fence 8
	// old holder fenced: true stale: false
	// no token: true
}
