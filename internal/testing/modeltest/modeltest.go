// Package modeltest holds the step the model-based tests of versioned and
// sqlxhelpers share: comparing a table read back from the database with the
// reference model after every operation.
package modeltest

import "fmt"

// Fataler is the part of *testing.T and *rapid.T that Compare needs.
type Fataler interface {
	Fatalf(format string, args ...any)
}

// Compare checks the rows read from a table, by fmt.Sprint of their key,
// against the model's: row r has key keys[r] and is want[r] when present
// says so, and absent otherwise; no other row exists; and no row's version
// is below the highest seen for it before (seen, updated here).
func Compare[R comparable](t Fataler, got map[string]R, keys [][]int64, want []R, present func(R) bool, version func(R) int64, seen []int64) {
	n := 0
	for r, w := range want {
		k := fmt.Sprint(keys[r])
		g, ok := got[k]
		if !present(w) {
			if ok {
				t.Fatalf("row %s is in the table after its delete: %+v", k, g)
			}
			continue
		}
		n++
		if !ok || g != w {
			t.Fatalf("row %s is %+v, the model says %+v", k, g, w)
		}
		if v := version(g); v < seen[r] {
			t.Fatalf("row %s went back from version %d to %d", k, seen[r], v)
		} else {
			seen[r] = v
		}
	}
	if len(got) != n {
		t.Fatalf("table has %d rows, the model %d", len(got), n)
	}
}
