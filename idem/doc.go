// Package idem makes a request take effect once, however often a client
// retries it: idempotency keys recorded under a UNIQUE constraint in the
// same transaction as the request's writes, their results replayed.
//
// [Do] takes the caller's transaction (a *sql.Tx — sqlx's tx.Tx, GORM's
// Statement.ConnPool — or a pgx.Tx), a scope, a key, a fingerprint of the
// request and fn. It claims the key in the keys table, runs fn, and stores
// fn's result (through a [Codec], [JSON] by default) in that transaction:
// if it commits, the key and fn's writes exist together; if it rolls back,
// neither does. The same key again replays the stored result without
// running fn — waiting, if the first request is still in progress, on the
// table's unique index — and the same key with another fingerprint is
// [ErrKeyReused]. A replay is one round trip; a first execution adds one
// statement to claim and one to store.
//
// [DoTx] is the same in a transaction it begins and commits itself on a
// pgx handle or a *sql.DB. Owning BEGIN and COMMIT, it sends the claim with
// BEGIN and the result with COMMIT (on pgx, and on database/sql opened with
// txlock.OpenDB): an idempotent transaction costs the round trips of the
// same transaction without idem, a replay costs one, and a failed store
// rolls the COMMIT back.
//
// [Middleware] does the same for net/http after the IETF Idempotency-Key
// draft: 400 without a key, 422 for a reused key, 409 (or a wait) while the
// first request runs, the stored response replayed afterwards. The handler
// runs in the middleware's transaction, reached with [TxFrom], which the
// middleware begins and commits as DoTx does, and its response is sent
// only once that transaction has committed.
//
// [RunPhases] is the form for work outside the database (a payment
// provider): a lease on the key, each completed phase recorded, a later
// attempt resuming where a crashed one stopped.
//
// [Migrate] (or [DDL] in a migration tool) creates the table; keys are
// kept for [WithRetention] and [Sweep] deletes expired ones in short
// batches. docs/idem.md has the statements and the reasoning behind them.
package idem
