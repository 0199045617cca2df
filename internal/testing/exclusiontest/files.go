package exclusiontest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// envDir names a worker's witness directory (RunFiles, OpenFiles).
const envDir = "EXCLUSIONTEST_DIR"

// Files is a witness kept in files, for a lock whose test has no database
// to hold the table excl: one file per key holding what the table's row
// holds (the holder's mark, the last token, the sections counted), read and
// rewritten under an flock(2) of that file. The file lock is the witness's
// own atomicity, as a row update is the table's; it has nothing to do with
// the lock under test. Its methods are Run's statements, with the same
// outcomes: rows is 1 when the statement's condition held, 0 when it did
// not (then [Section] reports [ErrOverlap]).
type Files struct{ dir string }

// RunFiles is [Run] with a [Files] witness in a directory of the test's
// own: each worker finds it through [OpenFiles].
func RunFiles(t *testing.T, cfg Config) Summary {
	t.Helper()
	f := &Files{dir: t.TempDir()}
	for k := range cfg.Keys {
		if err := os.WriteFile(f.path(k), []byte(fileRow{}.encode()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return run(t, cfg, []string{envDir + "=" + f.dir}, func() (counted int64, held int, err error) {
		for k := range cfg.Keys {
			var r fileRow
			if err := f.update(k, func(row *fileRow) bool { r = *row; return false }); err != nil {
				return 0, 0, err
			}
			counted += r.n
			if r.holder != "" {
				held++
			}
		}
		return counted, held, nil
	})
}

// OpenFiles is a worker's side of [RunFiles]: the witness its parent made.
func OpenFiles() (*Files, error) {
	dir := os.Getenv(envDir)
	if dir == "" {
		return nil, errors.New("exclusiontest: " + envDir + " is not set: not a worker of RunFiles")
	}
	return &Files{dir: dir}, nil
}

// Enter marks key k held by me, only if no one holds it ([Enter]).
func (f *Files) Enter(k int, me string) (rows int64, err error) {
	return f.apply(k, func(r *fileRow) bool {
		if r.holder != "" {
			return false
		}
		r.holder = me
		return true
	})
}

// Leave clears k's mark, only if it is still me, and counts the section
// ([Leave]).
func (f *Files) Leave(k int, me string) (rows int64, err error) {
	return f.apply(k, func(r *fileRow) bool {
		if r.holder != me {
			return false
		}
		r.holder, r.n = "", r.n+1
		return true
	})
}

// EnterFenced marks k held by me, only if its last token is smaller than
// token, taking it over from a holder that outlived its lock
// ([EnterFenced]).
func (f *Files) EnterFenced(k int, me string, token int64) (rows int64, err error) {
	return f.apply(k, func(r *fileRow) bool {
		if r.lastToken >= token {
			return false
		}
		r.holder, r.lastToken = me, token
		return true
	})
}

// LeaveFenced clears k's mark, only if it still has me and token, and
// counts the section ([LeaveFenced]).
func (f *Files) LeaveFenced(k int, me string, token int64) (rows int64, err error) {
	return f.apply(k, func(r *fileRow) bool {
		if r.holder != me || r.lastToken != token {
			return false
		}
		r.holder, r.n = "", r.n+1
		return true
	})
}

func (f *Files) apply(k int, change func(*fileRow) bool) (int64, error) {
	var changed bool
	err := f.update(k, func(r *fileRow) bool { changed = change(r); return changed })
	if err != nil || !changed {
		return 0, err
	}
	return 1, nil
}

func (f *Files) path(k int) string { return filepath.Join(f.dir, strconv.Itoa(k)) }

// update reads k's row under an exclusive flock of its file, lets change
// alter it, and writes it back if change says so.
func (f *Files) update(k int, change func(*fileRow) bool) error {
	file, err := os.OpenFile(f.path(k), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
	b, err := os.ReadFile(file.Name())
	if err != nil {
		return err
	}
	r, err := decodeRow(b)
	if err != nil {
		return fmt.Errorf("exclusiontest: key %d: %w", k, err)
	}
	if !change(&r) {
		return nil
	}
	if err := file.Truncate(0); err != nil {
		return err
	}
	_, err = file.WriteAt([]byte(r.encode()), 0)
	return err
}

// fileRow is a key's file: the table's row, one field a line.
type fileRow struct {
	holder    string
	lastToken int64
	n         int64
}

func (r fileRow) encode() string { return fmt.Sprintf("%s\n%d\n%d\n", r.holder, r.lastToken, r.n) }

func decodeRow(b []byte) (fileRow, error) {
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) != 4 {
		return fileRow{}, fmt.Errorf("malformed witness file %q", b)
	}
	var r fileRow
	var err1, err2 error
	r.holder = string(lines[0])
	r.lastToken, err1 = strconv.ParseInt(string(lines[1]), 10, 64)
	r.n, err2 = strconv.ParseInt(string(lines[2]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fileRow{}, fmt.Errorf("malformed witness file %q: %w", b, err)
	}
	return r, nil
}
