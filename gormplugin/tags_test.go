package gormplugin_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/sqlock/sqlock/versioned"
)

type TwoFences struct {
	ID      uint
	Version int64 `lock:"version"`
	A       int64 `lock:"fence"`
	B       int64 `lock:"fence"`
}

type StringFence struct {
	ID      uint
	Version int64  `lock:"version"`
	Fence   string `lock:"fence"`
}

type FenceWithoutVersion struct {
	ID    uint
	Fence int64 `lock:"fence"`
}

type FenceOnVersionColumn struct {
	ID      uint
	Version int64 `lock:"version"`
	Fence   int64 `gorm:"column:version" lock:"fence"`
}

type FenceIsTheKey struct {
	ID      uint  `lock:"fence"`
	Version int64 `lock:"version"`
}

// The plugin checks a model's lock tags by the rules package versioned
// and sqlxhelpers apply (internal/vmodel.Tags): a bad fence is a
// *versioned.TagError naming the fence field, the first write fails with
// it, and nothing is written.
func TestBadFenceModels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *gorm.DB) {
		for _, tc := range []struct {
			m      any
			field  string
			reason string
		}{
			{&TwoFences{}, "B", "a second fence field (the first is A)"},
			{&StringFence{}, "Fence", "the fence must be a plain Go integer"},
			{&FenceWithoutVersion{}, "Fence", `no field tagged lock:"version"`},
			{&FenceOnVersionColumn{}, "Fence", "the version's column"},
			{&FenceIsTheKey{}, "ID", "a key column"},
		} {
			if _, ok := tc.m.(*FenceOnVersionColumn); !ok {
				must(t, db.AutoMigrate(tc.m))
			} else {
				must(t, db.Exec("CREATE TABLE fence_on_version_columns (id integer PRIMARY KEY, version bigint)").Error)
			}
			err := db.Create(tc.m).Error
			var te *versioned.TagError
			if !errors.Is(err, versioned.ErrInvalidModel) || !errors.As(err, &te) || te.Field != tc.field || !strings.Contains(te.Reason, tc.reason) {
				t.Fatalf("%T: create error %v, want *versioned.TagError of %s mentioning %q", tc.m, err, tc.field, tc.reason)
			}
			var n int64
			must(t, db.Model(tc.m).Count(&n).Error)
			if n != 0 {
				t.Fatalf("%T: a row was written", tc.m)
			}
		}
	})
}
