package locktest

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The guard: every package of the repository — of every Go module in it —
// that implements sqlock.Lock has a conformance_test.go that calls this
// suite's Run. Implementing is decided by go/types on the package's
// non-test code (methods declared or promoted from embedded types), not by
// a list of names: a new backend that skips the suite fails here.

const (
	repoRoot    = "../../.."
	sqlockPath  = "github.com/sqlock/sqlock"
	locktestPkg = sqlockPath + "/internal/testing/locktest"
)

// TestConformanceGuardEveryLockBackendRunsTheSuite lists the packages that
// implement sqlock.Lock in every module of the repository and fails for
// each without a conformance_test.go that calls locktest.Run.
func TestConformanceGuardEveryLockBackendRunsTheSuite(t *testing.T) {
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, mods)
	var found []string
	for _, m := range mods {
		for _, b := range g.backends(t, m) {
			found = append(found, b.path)
			if !b.runsSuite {
				t.Errorf("package %s implements sqlock.Lock (%s) but has no conformance_test.go calling locktest.Run: see internal/README.md, \"Adding a backend\"",
					b.path, strings.Join(b.types, ", "))
			}
		}
	}
	t.Logf("%d modules; lock backends: %s", len(mods), strings.Join(found, ", "))
	// The detector must see the backends that exist, or it proves nothing.
	for _, want := range []string{"advisory", "lease", "redislock"} {
		if !slices.Contains(found, sqlockPath+"/"+want) {
			t.Errorf("the guard did not find %s implementing sqlock.Lock: it no longer detects implementations", want)
		}
	}
}

// TestConformanceGuardFailsForABackendWithoutTheSuite runs the guard on
// testdata/repo, a module whose packages implement sqlock.Lock in every
// way the guard must see — methods on a pointer, methods promoted from an
// embedded type of another package — with a conformance_test.go calling
// locktest.Run, with none, and with one that never calls it; and a type
// whose methods only look like Lock's.
func TestConformanceGuardFailsForABackendWithoutTheSuite(t *testing.T) {
	mods, err := findModules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := findModules("testdata/repo")
	if err != nil || len(fixture) != 1 {
		t.Fatalf("testdata/repo: %v modules, %v", len(fixture), err)
	}
	g := newGuard(t, append(mods, fixture...))
	got := map[string]bool{}
	for _, b := range g.backends(t, fixture[0]) {
		got[strings.TrimPrefix(b.path, fixture[0].path+"/")] = b.runsSuite
	}
	want := map[string]bool{"covered": true, "missing": false, "promoted": false, "decoy": false}
	if !maps(got, want) {
		t.Fatalf("the guard saw %v (package: runs the suite), want %v", got, want)
	}
}

func maps(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// module is a Go module of the repository.
type module struct{ path, dir string }

// findModules returns the modules whose go.mod is under root, outside
// testdata, vendor and hidden directories.
func findModules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" || d.IsDir() {
			return nil
		}
		mp, err := modulePath(p)
		if err != nil {
			return err
		}
		mods = append(mods, module{path: mp, dir: filepath.Dir(p)})
		return nil
	})
	return mods, err
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			rest, _, _ = strings.Cut(rest, "//")
			if rest = strings.TrimSpace(rest); strings.HasPrefix(rest, `"`) {
				return strconv.Unquote(rest)
			}
			return rest, nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// guard type-checks packages of the repository's modules from source. The
// standard library comes from its export data; other modules' packages
// are empty stand-ins: the methods of sqlock.Lock use only the standard
// library and sqlock, so what a stand-in hides cannot make or unmake an
// implementation, and the type errors it causes are ignored.
type guard struct {
	t       *testing.T
	fset    *token.FileSet
	mods    []module
	pkgs    map[string]*types.Package
	exports map[string]string // standard package → export data file
	std     types.Importer
	lock    *types.Interface
}

func newGuard(t *testing.T, mods []module) *guard {
	g := &guard{t: t, fset: token.NewFileSet(), mods: mods, pkgs: map[string]*types.Package{}, exports: map[string]string{}}
	g.std = importer.ForCompiler(g.fset, "gc", g.lookupExport)
	root, err := g.Import(sqlockPath)
	if err != nil {
		t.Fatal(err)
	}
	obj := root.Scope().Lookup("Lock")
	if obj == nil {
		t.Fatal("package sqlock declares no Lock")
	}
	g.lock = obj.Type().Underlying().(*types.Interface)
	return g
}

// dirOf is the directory of an import path in the repository's modules
// (the longest module path that is a prefix of it).
func (g *guard) dirOf(importPath string) (string, bool) {
	best := -1
	for i, m := range g.mods {
		if (importPath == m.path || strings.HasPrefix(importPath, m.path+"/")) && (best < 0 || len(m.path) > len(g.mods[best].path)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := g.mods[best]
	return filepath.Join(m.dir, filepath.FromSlash(strings.TrimPrefix(importPath, m.path))), true
}

// Import implements types.Importer.
func (g *guard) Import(importPath string) (*types.Package, error) {
	if p, ok := g.pkgs[importPath]; ok {
		return p, nil
	}
	var p *types.Package
	var err error
	switch dir, ok := g.dirOf(importPath); {
	case ok:
		p, err = g.check(importPath, dir)
	case isStd(importPath):
		p, err = g.std.Import(importPath)
	default:
		p = types.NewPackage(importPath, path.Base(importPath))
		p.MarkComplete()
	}
	if err != nil {
		return nil, err
	}
	g.pkgs[importPath] = p
	return p, nil
}

func isStd(importPath string) bool {
	first, _, _ := strings.Cut(importPath, "/")
	return !strings.Contains(first, ".")
}

// lookupExport finds a standard package's export data with go list (once
// for a package and everything it imports).
func (g *guard) lookupExport(importPath string) (io.ReadCloser, error) {
	if _, ok := g.exports[importPath]; !ok {
		out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", importPath).Output()
		if err != nil {
			return nil, fmt.Errorf("go list -export %s: %w", importPath, err)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			if p, file, ok := strings.Cut(line, "="); ok {
				g.exports[p] = file
			}
		}
	}
	file := g.exports[importPath]
	if file == "" {
		return nil, fmt.Errorf("no export data for %s", importPath)
	}
	return os.Open(file)
}

// check type-checks the non-test files of the package in dir, ignoring
// type errors.
func (g *guard) check(importPath, dir string) (*types.Package, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(g.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: g, Error: func(error) {}}
	p, _ := conf.Check(importPath, g.fset, files, nil)
	return p, nil
}

// backend is a package that implements sqlock.Lock.
type backend struct {
	path      string
	types     []string // its types that implement it
	runsSuite bool     // its conformance_test.go calls locktest.Run
}

// backends returns the packages of m that implement sqlock.Lock: public
// ones (a package under internal/ is no backend a user could pick) that
// are not commands, nor the root package that declares the interface.
func (g *guard) backends(t *testing.T, m module) []backend {
	var out []backend
	err := filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != m.dir && (skipDir(d.Name()) || d.Name() == "internal" || isFile(filepath.Join(p, "go.mod"))) {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(m.dir, p)
		importPath := path.Join(m.path, filepath.ToSlash(rel))
		if importPath == sqlockPath {
			return nil
		}
		bp, err := build.Default.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) || err == nil && bp.Name == "main" {
			return nil
		}
		if err != nil {
			return err
		}
		pkg, err := g.Import(importPath)
		if err != nil {
			return err
		}
		if impl := g.implementers(pkg); len(impl) > 0 {
			out = append(out, backend{path: importPath, types: impl, runsSuite: callsSuite(t, filepath.Join(p, "conformance_test.go"))})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// implementers are the named types of pkg, or pointers to them, that
// implement sqlock.Lock.
func (g *guard) implementers(pkg *types.Package) []string {
	var names []string
	scope := pkg.Scope()
	for _, n := range scope.Names() {
		tn, ok := scope.Lookup(n).(*types.TypeName)
		if !ok || tn.IsAlias() {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok || types.IsInterface(named) || named.TypeParams().Len() > 0 {
			continue
		}
		switch {
		case types.Implements(named, g.lock):
			names = append(names, n)
		case types.Implements(types.NewPointer(named), g.lock):
			names = append(names, "*"+n)
		}
	}
	return names
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// callsSuite reports whether the file at p exists, is built, and calls Run
// of this package, under whatever name it imports it.
func callsSuite(t *testing.T, p string) bool {
	if ok, err := build.Default.MatchFile(filepath.Dir(p), filepath.Base(p)); !ok || err != nil {
		return false
	}
	src, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	local := ""
	for _, imp := range f.Imports {
		if v, _ := strconv.Unquote(imp.Path.Value); v == locktestPkg {
			local = "locktest"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" || local == "_" {
		return false
	}
	calls := false
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Run" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
					calls = true
				}
			}
		}
		return !calls
	})
	return calls
}
