// Package promises keeps docs/promises.md honest: every test the table names
// must exist, so a promise cannot outlive the test that proves it.
package promises

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testRef matches `pkg.TestName` (or Example…, Fuzz…, Benchmark…) in a table
// cell, with an optional /subtest: `versioned.TestNoLostUpdate`,
// `internal/tools/demo.TestPayment/gorm`.
var testRef = regexp.MustCompile("`([a-z][a-z0-9_/]*)\\.((?:Test|Example|Fuzz|Benchmark)[A-Za-z0-9_]*)(/[^`]*)?`")

const root = "../../.."

// TestEveryNamedTestExists reads every row of docs/promises.md and guide.md's
// pitfall table and fails for each named test that no _test.go file of its
// package declares.
func TestEveryNamedTestExists(t *testing.T) {
	rows := 0
	for _, doc := range []string{"docs/promises.md"} {
		f, err := os.Open(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		line := 0
		for sc.Scan() {
			line++
			text := sc.Text()
			if !strings.HasPrefix(text, "| ") || strings.HasPrefix(text, "| promise") || strings.HasPrefix(text, "|---") {
				continue
			}
			refs := testRef.FindAllStringSubmatch(text, -1)
			if len(refs) == 0 {
				t.Errorf("%s:%d: a promise without a test: %s", doc, line, text)
				continue
			}
			rows++
			for _, r := range refs {
				if !declares(t, r[1], r[2]) {
					t.Errorf("%s:%d: %s.%s is named as proof but package %s declares no such test", doc, line, r[1], r[2], r[1])
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if rows < 40 {
		t.Errorf("docs/promises.md has %d promises with tests; the table looks truncated", rows)
	}
}

var declared = map[string]map[string]bool{}

// declares reports whether the package directory dir has a _test.go file
// declaring the function name (internal and external test packages alike).
// The root package is named sqlock.
func declares(t *testing.T, dir, name string) bool {
	t.Helper()
	names, ok := declared[dir]
	if !ok {
		names = map[string]bool{}
		path := dir
		if dir == "sqlock" {
			path = "."
		}
		files, err := filepath.Glob(filepath.Join(root, path, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, file := range files {
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
					names[fn.Name.Name] = true
				}
			}
		}
		declared[dir] = names
	}
	return names[name]
}

// TestCheckerSeesMissingTests makes sure the check above can fail: a name no
// package declares is reported, and a real one is found.
func TestCheckerSeesMissingTests(t *testing.T) {
	if declares(t, "hash", "TestNoSuchPromise") {
		t.Error("declares found a test that does not exist")
	}
	if !declares(t, "hash", "TestZeroAllocs") {
		t.Error("declares missed hash.TestZeroAllocs")
	}
	m := testRef.FindAllStringSubmatch("| x | y | `internal/tools/demo.TestDemo/gorm`, `hash.FuzzTextExtended` |", -1)
	if len(m) != 2 || m[0][1] != "internal/tools/demo" || m[0][2] != "TestDemo" || m[1][2] != "FuzzTextExtended" {
		t.Errorf("testRef parsed %q", m)
	}
}
