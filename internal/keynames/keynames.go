// Package keynames is the table in which advisory Lockers made with
// advisory.WithKeyNames record the text of their keys, and from which
// package inspect reads it back.
package keynames

// Table is the table's name, unqualified: it lives in the first schema of
// the search_path, like the lease table.
const Table = "sqlock_key_names"

// DDL creates the table. A key made from text by advisory.KeyOf or
// advisory.KeyText maps to that text; the first name recorded for a key
// stays (a reader checks that it hashes to the key).
const DDL = `CREATE TABLE IF NOT EXISTS sqlock_key_names (
    key  bigint PRIMARY KEY,
    name text   NOT NULL
)`

// Insert records $2 as the name of key $1 unless the key has one, and
// returns one row either way (so a driver's QueryRow has something to scan).
const Insert = `WITH ins AS (INSERT INTO sqlock_key_names (key, name) VALUES ($1, $2)
	ON CONFLICT (key) DO NOTHING RETURNING 1) SELECT count(*) FROM ins`
