// Package gormplugin makes every GORM write of a model with a
// lock:"version" field an optimistic-lock check and a version bump, and runs
// GORM transactions under PostgreSQL advisory locks.
//
//	db.Use(gormplugin.New())
//
//	type Order struct {
//		ID      uint
//		Status  string
//		Version int64 `gorm:"not null;default:1" lock:"version"`
//	}
//
//	err := db.Model(&order).Update("status", "paid").Error
//	if errors.Is(err, versioned.ErrStale) { … someone else won: re-read, retry … }
//
// Start with [New] and its options ([WithProbe], [WithNullPolicy] …);
// [Transaction] runs a GORM transaction under advisory locks.
//
// It promises:
//
//   - Every single-row write of a versioned model (Update, Updates, Save,
//     Delete, soft delete, a checked upsert) is checked against the
//     struct's version and bumps it. A stale one writes nothing and fails
//     with a *versioned.StaleError (errors.Is(err, versioned.ErrStale),
//     which package retry retries); a stale Save never falls back to an
//     upsert. No write lowers a version.
//   - No widened write: a versioned struct without a primary key is refused
//     (*versioned.KeyError), the caller's conditions are parenthesised, and
//     a write that cannot be checked (a slice of versioned rows, an upsert
//     that updates every column) fails with [sqlock.ErrUnsupported] before
//     anything is sent.
//   - After any failed write the struct equals its row; after a rollback
//     the plugin cannot see, [Resync] puts it back.
//   - A wrong lock tag fails every write of the model with a
//     *versioned.TagError, before anything is sent.
//   - A model with a lock:"fence" field is written fenced with the token
//     of sqlock.WithFencingToken in the statement's context: a lock holder
//     whose lock was taken over is refused (versioned.ErrFenced), and a
//     write with no token is refused before anything is sent.
//
// The version column is NOT NULL DEFAULT 1 (a created struct at version 0
// gets 1); [NullPolicy] says what happens to NULLs already there. The
// write-by-write contract is in docs/gormplugin.md.
package gormplugin
