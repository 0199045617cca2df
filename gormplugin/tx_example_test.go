package gormplugin_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/gormplugin"
	"github.com/sqlock/sqlock/txlock"
)

type Seat struct {
	ID      uint
	Show    string
	Holder  string
	Version int64 `gorm:"not null;default:1" lock:"version"`
}

// Two requests for the last seat of a show: the advisory lock on the show
// serialises them, so the second sees the seat taken. Opening GORM over
// txlock.OpenDB folds the lock into BEGIN (no extra round trip).
func ExampleTransaction() {
	cfg, err := pgx.ParseConfig("postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: txlock.OpenDB(*cfg)}), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(gormplugin.New()); err != nil {
		log.Fatal(err)
	}
	errSoldOut := errors.New("sold out")
	err = gormplugin.Transaction(context.Background(), db, advisory.KeyOf("show:42"), func(tx *gorm.DB) error {
		var seat Seat
		if err := tx.Where("show = ? AND holder = ''", "42").First(&seat).Error; errors.Is(err, gorm.ErrRecordNotFound) {
			return errSoldOut
		} else if err != nil {
			return err
		}
		return tx.Model(&seat).Update("holder", "alice").Error // versioned as well
	})
	if err != nil {
		log.Print(err)
	}
}
