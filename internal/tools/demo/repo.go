package demo

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"
	"gorm.io/gorm"

	"github.com/sqlock/sqlock/sqlxhelpers"
)

// The payment and stock scenarios' rows as a service declares them for GORM
// and sqlx alike, one struct each. The db tags name sqlx's columns (its
// default mapper would map ClaimedBy to "claimedby"; GORM's naming gives
// "claimed_by", so the tag makes the two agree). The version is tagged
// lock:"version", and gorm:"not null;default:1" makes AutoMigrate create the
// column the tables below have: NOT NULL DEFAULT 1.

// Order is a row of the payment scenario's orders table.
type Order struct {
	ID        int    `db:"id"`
	Status    string `db:"status"`     // unpaid → charging (claimed) → paid
	ClaimedBy *int   `db:"claimed_by"` // the replica that charges it
	Version   int64  `db:"version" lock:"version" gorm:"not null;default:1"`
}

// Product is a row of the stock scenario's products table.
type Product struct {
	ID      int   `db:"id"`
	Stock   int   `db:"stock"`
	Sold    int   `db:"sold"`
	Version int64 `db:"version" lock:"version" gorm:"not null;default:1"`
}

// orderRepo is the payment scenario's repository. Claim is one attempt at a
// read-modify-write: it returns a *versioned.StaleError when another replica
// wrote the order between the read and the write, so a caller wraps it with
// retry.Wrap; the retry re-reads and finds the order taken.
type orderRepo interface {
	// Claim moves an unpaid order to "charging" for this replica and returns
	// it, or returns nil when the order is no longer unpaid.
	Claim(ctx context.Context, id int) (*Order, error)
	// MarkPaid records that the claimed order o has been charged.
	MarkPaid(ctx context.Context, o *Order) error
}

// productRepo is the stock scenario's repository; Sell is one attempt, as
// Claim is.
type productRepo interface {
	// Sell takes one item of product id out of stock, after reserving it at
	// the warehouse (the race window); false when none is left.
	Sell(ctx context.Context, id int) (bool, error)
}

// gormOrders is orderRepo on GORM with the plugin registered
// (db.Use(gormplugin.New())): Update checks and bumps the version.
type gormOrders struct {
	db      *gorm.DB
	replica int
}

func (r gormOrders) Claim(ctx context.Context, id int) (*Order, error) {
	var o Order // a fresh struct on every attempt
	if err := r.db.WithContext(ctx).First(&o, id).Error; err != nil {
		return nil, err
	}
	if o.Status != "unpaid" {
		return nil, nil
	}
	err := r.db.WithContext(ctx).Model(&o).
		Updates(map[string]any{"status": "charging", "claimed_by": r.replica}).Error
	if err != nil {
		return nil, err
	}
	return &o, nil
}

func (r gormOrders) MarkPaid(ctx context.Context, o *Order) error {
	return r.db.WithContext(ctx).Model(o).Update("status", "paid").Error
}

type gormProducts struct{ db *gorm.DB }

func (r gormProducts) Sell(ctx context.Context, id int) (bool, error) {
	var p Product
	if err := r.db.WithContext(ctx).First(&p, id).Error; err != nil {
		return false, err
	}
	if p.Stock <= 0 {
		return false, nil
	}
	time.Sleep(reserveTime)
	p.Stock--
	p.Sold++
	return true, r.db.WithContext(ctx).Save(&p).Error // a versioned Save: stale, never an upsert
}

// sqlxOrders is orderRepo on sqlx: sqlxhelpers' Update checks and bumps the
// version of the same struct.
type sqlxOrders struct {
	db      *sqlx.DB
	h       *sqlxhelpers.Helper
	replica int
}

func (r sqlxOrders) Claim(ctx context.Context, id int) (*Order, error) {
	var o Order
	if err := r.db.GetContext(ctx, &o, "SELECT id, status, claimed_by, version FROM orders WHERE id = $1", id); err != nil {
		return nil, err
	}
	if o.Status != "unpaid" {
		return nil, nil
	}
	o.Status, o.ClaimedBy = "charging", &r.replica
	if err := r.h.Update(ctx, "orders", &o, sqlxhelpers.Columns("status", "claimed_by")); err != nil {
		return nil, err
	}
	return &o, nil
}

func (r sqlxOrders) MarkPaid(ctx context.Context, o *Order) error {
	o.Status = "paid"
	return r.h.Update(ctx, "orders", o, sqlxhelpers.Columns("status"))
}

type sqlxProducts struct {
	db *sqlx.DB
	h  *sqlxhelpers.Helper
}

func (r sqlxProducts) Sell(ctx context.Context, id int) (bool, error) {
	var p Product
	if err := r.db.GetContext(ctx, &p, "SELECT id, stock, sold, version FROM products WHERE id = $1", id); err != nil {
		return false, err
	}
	if p.Stock <= 0 {
		return false, nil
	}
	time.Sleep(reserveTime)
	p.Stock--
	p.Sold++
	return true, r.h.Update(ctx, "products", &p) // every column but the key and the version
}
