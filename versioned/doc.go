// Package versioned is sqlock's optimistic-locking core, independent of any
// ORM: the lock:"version" struct-tag model, ErrStale and *StaleError,
// compare-and-swap on any column, and helpers that run or check versioned
// UPDATE and DELETE statements for database/sql users.
//
// Contract: a versioned write whose expected version is not the row's current
// version changes nothing and returns an error for which
// errors.Is(err, ErrStale) holds; zero rows affected is never silent.
package versioned
