// Package sqlxhelpers gives sqlx users versioned updates and deletes from
// tagged structs, a guarded form of their own named UPDATE and DELETE
// statements, and transactions under advisory locks.
//
// Build one Helper per database and share it:
//
//	h, err := sqlxhelpers.New(db) // db is a *sqlx.DB
//
// It reads the bind style from the driver name (sqlx.BindType: $1 for pgx
// and lib/pq), and keeps, per struct type, the columns it writes and, per
// statement text, the rewrites it made (bounded; WithCacheSize). It holds no
// global state. h.On(tx) runs the same helpers on a *sqlx.Tx or *sqlx.Conn.
//
// # Contract
//
// A versioned write changes a row only if the row is still at the version
// the struct holds. Zero rows affected is never silent: it is a
// *versioned.StaleError (errors.Is(err, versioned.ErrStale), RetryCause
// "stale", so package retry retries it). On success an UPDATE increments
// the struct's version field; on any error the struct is unchanged. A write
// is never widened: a struct with no key, a zero key value, a statement
// with no top-level WHERE, or a statement the rewriter does not understand
// is a typed error and nothing is sent. A write that matched several rows
// is *versioned.RowsError (versioned.ErrKeyNotUnique), after the statement
// ran: run it in a transaction to roll it back.
//
// # Struct-driven writes
//
// The struct needs a lock:"version" integer field (see package versioned)
// and a key: the fields tagged lock:"key", or else the one field whose
// column is id (under the Helper's mapper too: an untagged ID field the
// mapper maps to another column is not taken as the key). Columns are the
// names sqlx maps the fields to (db tags, or the mapper's name), or a lock
// tag's column=NAME; the key's WHERE names the key fields' own columns, so
// the order the fields are declared in does not matter. Update writes every other
// mapped field, or the ones named with Columns:
//
//	UPDATE "accounts" SET "owner" = $1, "balance" = $2, "version" = "version" + 1
//	 WHERE "id" = $3 AND "version" = $4
//
// Identifiers are always quoted; values are always bind parameters.
//
// # Guarded hand-written statements
//
// NamedExec takes your own named UPDATE or DELETE and the struct, and adds
// the bump and the guard:
//
//	UPDATE accounts SET balance = balance - :amount WHERE id = :id
//	→ UPDATE accounts SET balance = balance - $1, "version" = "version" + 1
//	   WHERE (id = $2) AND "version" = $3
//
// Your condition is parenthesised, so an OR in it cannot bypass the guard;
// with UPDATE … FROM or DELETE … USING the version column is qualified with
// the target's alias or name. The statement is read by a tokenizer that
// follows PostgreSQL's lexical rules: '…' strings (a doubled quote is a
// quote), E'…' strings with backslash escapes, U&'…', B'…', X'…' and N'…' strings,
// "quoted" identifiers with "" escapes, -- comments and nested /* */
// comments, dollar quoting ($$…$$, $tag$…$tag$), parentheses and brackets
// (only the top-level WHERE counts), :: casts (not parameters), and sqlx
// :name parameters (a letter or _ then letters, digits, _ and .). Unlike
// sqlx.Named, it never takes a :name inside a string or comment for a
// parameter, and :: stays a cast (no :::: escaping). An array slice needs
// spaces around its colon (a[1 : n]), as :n would be a parameter.
//
// Accepted shapes: [WITH read-only CTEs] UPDATE [ONLY] table [*] [[AS]
// alias] SET … [FROM …] WHERE … [RETURNING …] and [WITH …] DELETE FROM
// [ONLY] table [*] [[AS] alias] [USING …] WHERE … [RETURNING …] (ONLY and *
// not both, as in PostgreSQL), with one optional trailing ';'. A word after
// a '.' is a label, never a keyword, as PostgreSQL reads it (o.from,
// o.distinct). Everything else is a *RewriteError
// (errors.Is(err, ErrRewrite)) whose Kind says why: ErrNotWrite, ErrNoWhere,
// ErrCTE (a data-modifying, SEARCH or CYCLE CTE), ErrMultipleStatements,
// ErrVersionAssigned, ErrUnbalanced, ErrPositional ($1, or ? for drivers
// that bind with ?), ErrAmbiguousString (a backslash in a standard string,
// whose meaning depends on standard_conforming_strings), ErrUnsupported
// (WHERE CURRENT OF, ORDER BY or LIMIT after WHERE …) and ErrSyntax.
// Rewrite exposes the rewriter itself; it is pure.
//
// The rewriter reads PostgreSQL's grammar. NamedExec is for PostgreSQL
// (pgx, lib/pq); Update and Delete work with any driver sqlx knows.
//
// # Locked transactions
//
// Do (and the Helper method of the same name) runs
// func(ctx context.Context, tx *sqlx.Tx) error in a transaction that holds
// pg_advisory_xact_lock on a key (and txlock.AlsoLock's), through txlock's
// engine, so it has exactly txlock.Do's semantics: keys locked in
// canonical order before the function's first statement and released by
// COMMIT or ROLLBACK (never leaked), a bounded wait (txlock.WithTimeout;
// txlock.ErrTimeout), the whole transaction retried on serialization
// failures, deadlocks and stale versioned writes (never on a cancelled
// context), and a COMMIT whose outcome is unknown reported as an error
// matching txlock.ErrAmbiguousCommit and not retried. Inside the function,
// h.On(tx) runs the versioned helpers in the transaction. The function must
// be safe to run more than once: re-read inside it what it depends on.
//
// # Retrying repositories
//
// A stale write is worth another attempt after a re-read. Wrap a repository
// method that reads, changes and writes with package retry
// (retry.Wrap(repo.Deposit)) or run it in retry.Do; see the examples.
package sqlxhelpers
