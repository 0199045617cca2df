// Package versioned is sqlock's optimistic-locking core, independent of any
// ORM: the lock:"version" struct-tag model, ErrStale and *StaleError,
// compare-and-swap on any column, and helpers that run or check versioned
// UPDATE and DELETE statements for database/sql users. It imports only the
// standard library and sqlock's observe package.
//
// # Contract
//
//   - No lost update. A versioned write whose expected version is not the
//     row's current version changes nothing and returns an error for which
//     errors.Is(err, ErrStale) holds (a *StaleError). Zero rows affected is
//     never silent: not from Update or Delete, not from a hand-written
//     statement checked with Check.
//   - No unguarded mass update. Every write targets its row by key; a
//     missing key value (nil, a nil pointer, a zero value, a NULL
//     driver.Valuer) is refused with ErrNoKey before anything is sent. A
//     write whose key matches several rows is reported (ErrKeyNotUnique).
//   - Keys and values are bind parameters; table and column names are
//     quoted for the dialect with embedded quote characters doubled. No
//     string a caller passes is spliced into SQL.
//   - Bad input gets a typed error and sends nothing: a nil handle
//     (ErrNilHandle), an empty or invalid identifier (ErrInvalidIdent), a
//     version that would overflow its Go type (ErrOverflow), an invalid
//     model (ErrInvalidModel, ErrNoVersionField), any other misuse
//     (ErrInvalidArg).
//   - A stale error is retryable: *StaleError has RetryCause() == "stale",
//     which package retry recognises. Retry the whole read–modify–write —
//     re-read the row inside the function given to retry.Do — never just
//     the statement.
//
// # The version model
//
// A versioned row has an integer column, NOT NULL, that every write
// increments: UPDATE … SET version = version + 1 WHERE key = $k AND
// version = $v. The new version is therefore always expected + 1, so Update
// returns it without a RETURNING clause: one round trip, on every dialect.
//
// In Go the version is any integer type: int, int8 … int64, uint … uint64,
// or a type defined on one. Update and Delete are generic in it, and its
// type decides where it overflows: an int8 version at 127 or a uint8 at 255
// is an *OverflowError, never a wrap-around to a value an old reader might
// hold. uint64 versions stop at math.MaxInt64, the most database/sql can
// bind. Nullable versions (*int64, sql.NullInt64) are not supported, on
// purpose: NULL never equals the expected version and NULL + 1 is NULL, so
// a NULL version makes every write either a conflict or a silent no-op.
// Declare the column NOT NULL DEFAULT 1, as gormplugin asks (versioned
// itself works from any starting value: it only compares and increments).
//
// A struct declares its version field with the tag lock:"version" (and,
// optionally, its key fields with lock:"key"; without them a field whose
// column is "id" is the key). The tag grammar is a comma-separated list:
// version or key, then optionally column=NAME. [UpdateStruct] and
// [DeleteStruct] parse a type once, cache the verdict, and fail with a
// *[TagError] the first time they meet a struct with a wrong tag — a
// float or string version, a pointer, two version fields, an unexported field, a
// field reached through an embedded pointer, a misspelt tag such as
// lock:"verison". gormplugin and sqlxhelpers read the same tags through the
// same model. Column names for struct fields resolve as
// lock:"version,column=…", then db:"…" (sqlx's tag), then the field name
// in snake_case (UserID → user_id); a Table built by hand names its columns
// itself. UpdateStruct and DeleteStruct match the struct's key fields to
// the Table's key columns by these names, never by position, and refuse a
// struct whose key fields do not name exactly the Table's key columns
// (ErrNoKey).
//
// # Writes
//
// A Table names the table, its key columns (default "id"), its version
// column (default "version") and the Dialect (Postgres, MySQL or SQLite),
// with the fixed statements quoted and built once; UPDATE statements are
// cached per list of assigned columns. Update, Delete and CompareAndSwap
// take any Execer or Querier — *sql.DB, *sql.Tx and *sql.Conn all work —
// and a context first.
//
// With WithProbe, a stale write runs one more query (SELECT version by key)
// so that the *StaleError says whether the row is gone or changed, and its
// current version. The probe costs nothing unless a write goes stale.
//
// CompareAndSwap is for state transitions that need no version column:
// UPDATE tasks SET status = 'claimed', worker_id = $1 WHERE id = $2 AND
// status = 'unclaimed'. Losing the race is the ordinary result Lost, not an
// error; a row that does not exist is Missing. On PostgreSQL both answers
// come from a single statement.
//
// For a statement written by hand, Check (or Guard.Check) turns its result
// into the same errors: 0 rows is a *StaleError, more than one a
// *RowsError.
//
// # Observability
//
// WithObserver (and Guard.Observer) reports each stale write as an
// observe.Event of Kind observe.Stale, Source "versioned", with the table
// and the *StaleError. The default observer does nothing.
package versioned
