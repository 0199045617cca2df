package versioned_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
	"github.com/sqlock/sqlock/versioned"
)

// fenceRow is a row of the fence model: fence 0 is NULL (never fenced).
type fenceRow struct {
	present        bool
	version, fence int64
}

// Model-based: random sequences of fenced and unfenced updates and
// deletes by key and by struct, with random tokens and expected versions,
// against three rows (some NULL-fenced, some deleted and recreated). Every
// outcome is predicted exactly — written, fenced (fence past the token,
// whatever the version), stale (another version) or gone — and after
// every operation the table equals the model: a refused write changes
// nothing, an accepted one bumps the version by one and sets the fence to
// its token.
func TestFencedWritesModel(t *testing.T) {
	pg := pgtest.New(t)
	db := pg.SQL()
	if _, err := db.Exec(`CREATE TABLE fm (id bigint PRIMARY KEY, version bigint NOT NULL, fence bigint)`); err != nil {
		t.Fatal(err)
	}
	tbl := versioned.MustTable("fm")
	type fm struct {
		ID      int64
		Version int64 `lock:"version"`
		Fence   int64 `lock:"fence"`
	}
	ops := 0
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		rows := make([]fenceRow, 3)
		if _, err := db.Exec(`DELETE FROM fm`); err != nil {
			rt.Fatal(err)
		}
		for i := range rows {
			rows[i] = fenceRow{present: true, version: 1, fence: int64(rapid.IntRange(0, 3).Draw(rt, "fence"))}
			var f any
			if rows[i].fence > 0 {
				f = rows[i].fence
			}
			if _, err := db.Exec(`INSERT INTO fm VALUES ($1, 1, $2)`, i+1, f); err != nil {
				rt.Fatal(err)
			}
		}
		for range rapid.IntRange(5, 25).Draw(rt, "ops") {
			ops++
			i := rapid.IntRange(0, len(rows)-1).Draw(rt, "row")
			r, id := &rows[i], int64(i+1)
			tok := int64(rapid.IntRange(0, 6).Draw(rt, "token")) // 0: unfenced
			exp := r.version + int64(rapid.IntRange(-1, 1).Draw(rt, "versionOff"))
			del := rapid.IntRange(0, 4).Draw(rt, "op") == 0
			byStruct := tok > 0 && rapid.Bool().Draw(rt, "struct")
			var err error
			switch {
			case byStruct && del:
				err = versioned.DeleteStruct(sqlock.WithFencingToken(ctx, tok), db, tbl, &fm{ID: id, Version: exp})
			case byStruct:
				s := fm{ID: id, Version: exp}
				err = versioned.UpdateStruct(sqlock.WithFencingToken(ctx, tok), db, tbl, &s)
				if err == nil && (s.Version != exp+1 || s.Fence != tok) {
					rt.Fatalf("struct after the write: %+v", s)
				}
			default:
				var fence []versioned.Pair
				if tok > 0 {
					fence = append(fence, versioned.Fence("fence", tok))
				}
				if del {
					err = versioned.Delete(ctx, db, tbl, id, exp, fence...)
				} else {
					_, err = versioned.Update(ctx, db, tbl, id, exp, fence...)
				}
			}
			var fe *versioned.FencedError
			var se *versioned.StaleError
			switch {
			case !r.present:
				if !errors.As(err, &se) || (tok > 0 && !se.Gone) || errors.Is(err, versioned.ErrFenced) {
					rt.Fatalf("row %d gone: %v", i, err)
				}
				if rapid.Bool().Draw(rt, "recreate") {
					*r = fenceRow{present: true, version: 1}
					if _, err := db.Exec(`INSERT INTO fm VALUES ($1, 1, NULL)`, i+1); err != nil {
						rt.Fatal(err)
					}
				}
			case tok > 0 && r.fence > tok:
				if !errors.As(err, &fe) || fe.Current != r.fence || fe.Token != tok || errors.Is(err, versioned.ErrStale) {
					rt.Fatalf("row %d fenced at %d, token %d: %v", i, r.fence, tok, err)
				}
			case exp != r.version:
				if !errors.As(err, &se) || (tok > 0 && (!se.Probed || se.Current != r.version)) || errors.Is(err, versioned.ErrFenced) {
					rt.Fatalf("row %d at %d, expected %d: %v", i, r.version, exp, err)
				}
			case err != nil:
				rt.Fatalf("row %+v, token %d, expected %d: %v", *r, tok, exp, err)
			case del:
				r.present = false
			default:
				r.version++
				if tok > 0 {
					r.fence = tok
				}
			}
			// The table equals the model.
			for j, want := range rows {
				var v int64
				var f sql.NullInt64
				err := db.QueryRow(`SELECT version, fence FROM fm WHERE id = $1`, j+1).Scan(&v, &f)
				got := fenceRow{present: err == nil, version: v, fence: f.Int64}
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					rt.Fatal(err)
				}
				if !want.present {
					want = fenceRow{}
				}
				if got != want {
					rt.Fatalf("row %d is %+v, the model says %+v", j, got, want)
				}
			}
		}
	})
	t.Logf("%d operations checked against the model", ops)
}
