package exclusiontest

import (
	"os"
	"testing"
)

// TestFilesKeepTheTablesOutcomes: the file witness answers each statement
// as the table excl does — a second Enter, a Leave by someone else, a
// fenced Enter with a token not above the last one and a fenced Leave with
// another token match no row — and counts only sections that left.
func TestFilesKeepTheTablesOutcomes(t *testing.T) {
	f := &Files{dir: t.TempDir()}
	if err := os.WriteFile(f.path(0), []byte(fileRow{}.encode()), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() (int64, error)
		rows int64
	}{
		{"a enters", func() (int64, error) { return f.Enter(0, "a") }, 1},
		{"b enters a held key", func() (int64, error) { return f.Enter(0, "b") }, 0},
		{"b leaves a's section", func() (int64, error) { return f.Leave(0, "b") }, 0},
		{"a leaves", func() (int64, error) { return f.Leave(0, "a") }, 1},
		{"a leaves again", func() (int64, error) { return f.Leave(0, "a") }, 0},
		{"c enters with token 5", func() (int64, error) { return f.EnterFenced(0, "c", 5) }, 1},
		{"d enters with token 5", func() (int64, error) { return f.EnterFenced(0, "d", 5) }, 0},
		{"e takes over with token 6", func() (int64, error) { return f.EnterFenced(0, "e", 6) }, 1},
		{"c leaves, fenced out", func() (int64, error) { return f.LeaveFenced(0, "c", 5) }, 0},
		{"e leaves", func() (int64, error) { return f.LeaveFenced(0, "e", 6) }, 1},
	}
	for _, s := range steps {
		rows, err := s.do()
		if err != nil || rows != s.rows {
			t.Fatalf("%s: %d rows, %v; want %d rows", s.name, rows, err, s.rows)
		}
	}
	var r fileRow
	if err := f.update(0, func(row *fileRow) bool { r = *row; return false }); err != nil {
		t.Fatal(err)
	}
	if r != (fileRow{lastToken: 6, n: 2}) {
		t.Fatalf("row %+v, want two sections counted, none held, last token 6", r)
	}
}
