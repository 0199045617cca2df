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
// # The version field
//
// One field per model, of any Go integer type (int, int8 … int64, uint …
// uint64, or a type defined on one), tagged lock:"version"; its column is
// GORM's (gorm:"column:…" renames it). The plugin reads the tag from GORM's
// parsed schema once per schema and caches the verdict; a version that is
// not a plain integer (float, string, *int64, sql.NullInt64), a second
// version field, or a malformed lock tag fails every write of the model
// with a *versioned.TagError (versioned.ErrInvalidModel), before anything is
// sent. Make the column NOT NULL DEFAULT 1 — gorm:"not null;default:1" on
// the field makes AutoMigrate create it so (without it AutoMigrate makes a
// nullable column); see [NullPolicy] for NULLs that are already there.
//
// # The contract
//
// Create, CreateInBatches, Save of a new record, and creates from maps: a
// zero version becomes 1, an explicit one is kept (also with Unscoped). The
// version column is written even when Select or Omit would leave it out,
// so the row gets the struct's version, never NULL.
//
// Update, Updates (map or struct), UpdateColumn(s), their Select/Omit forms
// and Save of an existing record, on a model struct with its primary key
// set ("a single-row write"): the statement is
//
//	UPDATE … SET …, version = version + 1 WHERE <pk> AND version = <the struct's version>
//
// Any value the update itself gives the version (a map key, a field of the
// Dest struct, Select("version")) is ignored; Omit("version")
// does not stop the bump. On success the struct's version is the new one. If
// the statement matches no row, its error is a *versioned.StaleError
// (errors.Is(err, versioned.ErrStale); Table, Key, Expected, Op) and GORM's
// implicit transaction rolls back, hooks' writes included; inside
// db.Transaction the error is returned to fn. The struct's version is
// unchanged on any failure. Zero rows are never silent, and a stale Save
// never falls back to GORM's upsert: it writes nothing. A write that would
// take the version past its type's maximum fails with
// *versioned.OverflowError before anything is sent. A key that matches
// several rows is a *versioned.RowsError and rolls back.
//
// Delete of a single row checks the version the same way and fails stale
// without deleting. A soft delete (gorm.DeletedAt, or any field type with
// GORM delete clauses) is a versioned update: deleted_at is set, the version
// is checked and bumped, and the struct gets the new version (or, on
// failure, its old deleted_at back). Unscoped keeps its GORM meaning — no
// soft-delete filter, a hard delete — and keeps the version check.
//
// A single-row write whose struct has a version but a zero primary key is
// refused with a *versioned.KeyError (versioned.ErrNoKey): it is never
// widened to every row that has that version. A struct with neither a key
// nor a version — Model(&Order{}).Where(…) — is a batch write: every
// matched row's version is bumped without a check (so optimistic writers
// holding an old version notice), and GORM's own ErrMissingWhereClause
// still guards against an update without conditions. The same goes for
// db.Delete(&Order{}, id) and the generics API's condition-based Update and
// Delete.
//
// Where GORM writes one struct's values under another's key, the struct
// that names the row is checked: db.Model(&loaded).Delete(&Order{}) checks
// the Model's version (and gives it the new version and deleted_at of a
// soft delete); db.Model(&Order{}).Where(…).Updates(&loaded) with a loaded
// struct (non-zero version) as the values checks that struct's key and
// version, and refuses it without a key (*versioned.KeyError) — a
// versioned struct is never written unchecked over a newer row. A values
// struct at version 0 is plain values: a batch write.
//
// The caller's own WHERE conditions on a single-row write are put in one
// parenthesised group before the primary key and the version are appended
// (WHERE (caller's conditions) AND <pk> AND version = ?), so no Or() — a
// lone one included — can widen the write past the row.
//
// A chain may be reused (tx := db.Model(&o); tx.Update(…); tx.Update(…)):
// each write is checked by the version the struct has when it runs.
//
// Model(&slice) updates and deletes of a non-empty slice of versioned rows
// fail with *UnsupportedError (ErrUnsupported) — one statement cannot check
// several versions — as do ON CONFLICT upserts that update every column
// (Save of a slice, Clauses(clause.OnConflict{UpdateAll: true})), which
// would overwrite newer rows unchecked. Write rows one at a time. Empty
// slices are batch writes. Non-addressable values (db.Model(order), the
// generics API's Updates(ctx, value)) are checked like pointers; their
// version cannot be bumped in place, so re-read after the write.
//
// No write lowers a version. In an upsert's ON CONFLICT … DO UPDATE the
// version is never copied from the inserted row: it is bumped. An upsert
// of one struct is checked like an update: its DO UPDATE applies only to
// a row at the struct's version, and always bumps it; a struct at version
// 0 (never loaded) cannot update a row that is there, and a loaded struct
// cannot recreate a row that is gone — each writes nothing and fails with
// *versioned.StaleError (RowGone for the second). One statement cannot
// both update a row at the struct's version and decline to insert one, so
// a loaded struct's upsert runs where its INSERT can be taken back: in
// GORM's implicit transaction, else in a savepoint the plugin sets in your
// transaction, else (SkipDefaultTransaction) in a transaction the plugin
// opens around that one statement; the refusal rolls it back, and your
// transaction goes on unharmed. Upserts of a slice (GORM's association saves, which
// rewrite foreign keys to the values they hold) and SkipVersionCheck
// upserts are not checked: a DO UPDATE that names the version (UpdateAll,
// DoUpdates with it) bumps every row it updates, one that does not bumps
// only the rows it changes. The row's version is returned into the
// structs (RETURNING).
//
// Association(…).Delete updates the rows that hold the foreign key through
// a statement GORM builds on a fresh model, where the plugin can neither
// check their versions nor bump the structs holding them; on a versioned
// table it fails with *UnsupportedError before anything is sent. Clear the
// foreign key through the struct instead (db.Model(&row).Update("owner_id",
// nil)), or with Association(…).Clear() from a belongs-to owner, which
// writes through the owner and is checked.
//
// A statement without a model (db.Table("orders").Updates(map…)) has no
// schema the plugin could recognise and is not versioned.
//
// # After a failure
//
// After any failed write the struct equals its row. A write whose UPDATE
// or DELETE succeeded but whose operation then failed and was rolled back
// by GORM's implicit transaction — an after-hook's error, an association
// that could not be saved — gives the struct its old version (and a soft
// delete its old deleted_at) back; a failed create gives it its zero
// version back. A write that holds although the call failed (no implicit
// transaction: SkipDefaultTransaction, or inside the caller's transaction)
// keeps the new version, as the row does.
//
// The plugin cannot see a caller's own transaction roll back: after
// db.Transaction (or a nested SavePoint) whose fn failed after a
// successful versioned write, the struct is ahead of its row, and its next
// write would be a false stale. Call [Resync] on each such struct (it
// reads the version and deleted_at back), or re-read it. [Transaction]
// does this by itself: when its transaction rolls back (or COMMIT fails),
// the structs its fn wrote are put back as they were.
//
// # Opting out
//
// db.Scopes(SkipVersionCheck) makes the statements of that chain deliberate blind writes: no version check, no
// key or slice refusal, upserts allowed, but every updated row is still
// bumped. It is deliberately not Unscoped.
//
// # NULL versions
//
// GORM loads a NULL version as 0 into a fresh struct (but leaves a reused
// struct's old value in place: re-read into a fresh value inside retry
// loops). Under the default NullAsZero a struct at version 0 is checked with
// (version = 0 OR version IS NULL) and bumped with COALESCE(version, 0) + 1,
// so a NULL row gets version 1 on its first write and is checked from then
// on; batch writes turn NULLs into 1 too. Under NullRefused a NULL row is
// never written: the write fails with *NullVersionError (ErrNullVersion),
// which is not retried.
//
// # Errors and retries
//
// *versioned.StaleError has RetryCause() == "stale", so retry.Do retries a
// function that re-reads the row and writes again. WithProbe adds one SELECT
// after a conflict (never before) to tell a row that is gone
// (StaleError.Gone) from one that changed (RowChanged,
// with StaleError.Current). WithObserver and WithLogger report every stale
// write as an observe.Stale event with Source "gormplugin".
//
// # Cost
//
// The plugin adds no round trip, with one exception: the checked upsert of
// a loaded struct outside GORM's implicit transaction adds SAVEPOINT and
// RELEASE (inside your transaction) or BEGIN and COMMIT around its
// statement (see above). Per statement it costs one cache lookup
// keyed by GORM's *schema.Schema and a few small allocations; it never
// parses a schema or a tag per call (GORM's ConvertToAssignments, which
// GORM would run anyway, is called once, by the plugin instead of by GORM).
//
// # Locked transactions
//
// [Transaction] and [TransactionKeys] run a func(tx *gorm.DB) error in a
// GORM transaction that holds pg_advisory_xact_lock on one or more keys
// from before fn's first statement until COMMIT or ROLLBACK, with txlock's
// retries of the whole transaction, with GORM's PrepareStmt on or off.
package gormplugin
