// Package advisory provides PostgreSQL advisory-lock keys and session-level
// advisory locks that never leak: each held lock owns a connection taken out
// of the pool, which goes back only after a confirmed unlock and is
// destroyed on any doubt.
package advisory
