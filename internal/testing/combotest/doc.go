// Package combotest holds tests of sqlock's packages used together, as the
// guide recommends them: advisory session locks, txlock transactions and
// sqlxhelpers on one pool, on every handle kind the package docs claim
// (txlock.OpenDB, pgx's stdlib, lib/pq, pgxpool). It has no code of its
// own.
package combotest
