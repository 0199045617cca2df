package promises

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink   = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	tickPath = regexp.MustCompile("`([\\w.\\-/]+\\.(?:go|md|txt|svg|sh|mod))(?::\\d+)?`")
)

// TestDocLinksStayInTheRepository checks every relative link, and every
// file path named in backticks, in README.md and docs/*.md: each must be a
// file of this repository. The project stands alone, so no link may leave
// it for a sibling directory.
func TestDocLinksStayInTheRepository(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	top, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, doc)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
				continue
			}
			checkInRepo(t, top, name, filepath.Join(filepath.Dir(doc), strings.SplitN(target, "#", 2)[0]), m[0])
		}
		for _, m := range tickPath.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "/") {
				continue // a bare file name (go.mod) names no place
			}
			a, b := filepath.Join(root, m[1]), filepath.Join(filepath.Dir(doc), m[1])
			if !exists(a) && !exists(b) {
				t.Errorf("%s: %s names a file that is not in the repository", name, m[0])
			}
		}
	}
}

func checkInRepo(t *testing.T, top, doc, path, link string) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if rel, err := filepath.Rel(top, abs); err != nil || strings.HasPrefix(rel, "..") {
		t.Errorf("%s: %s leaves the repository", doc, link)
		return
	}
	if !exists(abs) {
		t.Errorf("%s: %s: no such file", doc, link)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestNothingPointsOutsideTheRepository: no source file, script or doc
// names a path in the workspace around the repository; the project stands
// alone.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	outside := ".." + "/shared" // spelt in two parts so that this file passes its own check
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".yml", ".yaml", ".txt":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, outside) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d points outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
