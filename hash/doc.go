// Package hash computes PostgreSQL's hashtext and hashtextextended in Go.
// A file that also needs the standard library's package hash imports one of
// the two under another name, for example sqhash "github.com/sqlock/sqlock/hash".
//
// [Text](s) returns exactly what the SQL expression hashtext(s) returns, and
// [TextExtended](s, seed) exactly what hashtextextended(s, seed) returns, for
// every string and seed, on a little-endian server (x86-64, arm64: every
// common platform) whose database encoding is UTF-8 and whose collation is
// deterministic (the default, "C", libc, or a deterministic ICU collation).
// Package advisory builds its keys with them
// ([github.com/sqlock/sqlock/advisory.KeyOf]).
//
// Both functions hash the bytes of s as they are; a Go string is UTF-8 bytes,
// which is what a UTF-8 database stores. What is not reproducible on the
// client:
//
//   - nondeterministic ICU collations, which hash an ICU sort key instead of
//     the bytes;
//   - bpchar (char(n)) values, which the server hashes with trailing spaces
//     removed (strip them before calling);
//   - databases in an encoding other than UTF-8, when s is not ASCII;
//   - big-endian servers (s390x), whose hash_bytes reads words the other way.
//
// The algorithm is Bob Jenkins' lookup3 in PostgreSQL's variant (hash_bytes
// and hash_bytes_extended in src/common/hashfn.c): the initial state adds
// 3923095 to the golden ratio and the length, and the final mix always runs,
// also for the empty string, so stock lookup3 libraries give other values.
//
// Both functions are pure, safe for concurrent use and allocate nothing.
package hash
