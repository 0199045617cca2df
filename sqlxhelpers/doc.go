// Package sqlxhelpers gives sqlx users versioned updates and deletes from
// tagged structs, a guarded form of their own named UPDATE and DELETE
// statements, and transactions under advisory locks.
package sqlxhelpers
