// Package sqlxhelpers gives sqlx users versioned updates and deletes from
// tagged structs, a guarded form of their own named UPDATE and DELETE
// statements, and transactions under advisory locks.
//
// Build one [Helper] per database with [New] and share it; [Helper.On] runs
// the same helpers on a *sqlx.Tx or *sqlx.Conn. Then:
//
//   - [Helper.Update] and [Helper.Delete] write a struct with a
//     lock:"version" field (package versioned's tags) by its key and
//     version; [Columns] limits the assigned columns.
//   - [Helper.NamedExec] runs your own named UPDATE or DELETE with the
//     version bump and a version guard added to its top-level WHERE.
//   - [Do] (and [Helper.Do]) runs a function in a transaction that holds
//     pg_advisory_xact_lock on a key (and txlock.AlsoLock's), with
//     txlock.Do's semantics and retries.
//
// It promises:
//
//   - No lost update: a write changes a row only if it is still at the
//     struct's version; zero rows affected is a *versioned.StaleError
//     (errors.Is(err, versioned.ErrStale)), which package retry retries. On
//     success an UPDATE increments the struct's version; on any error the
//     struct is unchanged.
//   - No widened write: a struct without a key value, a statement without a
//     top-level WHERE, or one the rewriter cannot guard with certainty is a
//     typed error — a *[RewriteError] ([ErrRewrite]) or a *[BindError]
//     ([ErrBind]) — and nothing is sent. Your condition is parenthesised,
//     so an OR in it cannot bypass the guard.
//   - Identifiers are quoted; values are bind parameters.
//   - A struct with a lock:"fence" field is written fenced with the token
//     of sqlock.WithFencingToken in the context: a lock holder whose lock
//     was taken over is refused (versioned.ErrFenced), and a write with no
//     token is refused before anything is sent.
//
// NamedExec reads PostgreSQL's grammar (pgx, lib/pq), or MySQL's on a
// MySQL or MariaDB handle, where what depends on sql_mode ("…", a backslash
// in a string) or runs from a comment (/*! … */) is refused; Update and
// Delete work with any driver sqlx knows. The statements, the rewriter's
// lexical rules and the shapes it accepts are in docs/sqlxhelpers.md.
package sqlxhelpers
