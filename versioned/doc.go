// Package versioned is sqlock's optimistic-locking core, independent of any
// ORM: versioned UPDATE and DELETE by key, compare-and-swap on any column,
// and the lock:"version" struct-tag model that gormplugin and sqlxhelpers
// share. It works on *sql.DB, *sql.Tx and *sql.Conn ([DB]), with PostgreSQL,
// MySQL and SQLite ([Dialect]).
//
// Start with a [Table] ([NewTable] or [MustTable]), then [Update] or
// [Delete] by key and expected version, [UpdateStruct] or [DeleteStruct]
// for a struct with a lock:"version" field, or [CompareAndSwap] for a state
// transition that needs no version column. UpdateStruct applies its
// assignments to the struct (Set("status", "paid") leaves Status "paid"),
// so each needs a field of its column that holds the value exactly.
//
// It promises:
//
//   - No lost update: a write whose expected version is not the row's
//     changes nothing and returns a *[StaleError] (errors.Is(err,
//     [ErrStale])). Zero rows affected is never silent.
//   - No unguarded mass update: every write targets its row by key; a
//     missing key is refused with [ErrNoKey] before anything is sent, and a
//     key that matched several rows is reported ([ErrKeyNotUnique]).
//   - Keys and values are bind parameters; identifiers are quoted for the
//     dialect. No string a caller passes is spliced into SQL.
//   - Bad input gets a typed error and sends nothing: a nil handle
//     ([sqlock.ErrNilHandle]), a version past its type's maximum
//     ([ErrOverflow]), a struct with wrong lock tags ([ErrInvalidModel]),
//     any other wrong argument ([ErrInvalidArg]).
//   - A stale error is retryable (RetryCause "stale", which package retry
//     recognises): retry the whole read–modify–write, never the statement.
//
// A [Fence] (or a lock:"fence" field and [sqlock.WithFencingToken]) makes a
// write fenced: a lock holder whose lock was taken over is refused by the
// row itself ([ErrFenced]); see docs/versioned.md#fenced-writes.
//
// A version column is an integer, NOT NULL DEFAULT 1 (the value gormplugin
// gives a new row; versioned itself only compares and increments, so any
// start works). [WithProbe] tells a row that is gone from one that changed,
// at the cost of one query after a conflict only; [WithObserver] reports
// each stale write.
//
// The statements, the tag grammar and the key rules are in docs/versioned.md.
package versioned
