package sqlxhelpers

import (
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"
)

var reasonKinds = []string{kindNotWrite, kindNoWhere, kindCTE, kindMultipleStatements, kindVersionAssigned,
	kindUnbalanced, kindPositional, kindAmbiguousString, kindUnsupported, kindSyntax, kindSpec}

// FuzzRewrite: Rewrite never panics; every refusal is a *RewriteError whose
// Kind is one of the reason sentinels; every accepted output lexes, has
// exactly one top-level WHERE of the form "(<condition>) AND <version> =
// :<param>", one top-level version assignment for an UPDATE, keeps the
// input's tokens in order, and binds the parameters it lists.
// TestRewriteParsesInPostgres PREPAREs the corpus against PostgreSQL.
func FuzzRewrite(f *testing.F) {
	for _, c := range acceptedCases {
		f.Add(c.in, uint8(sqlx.DOLLAR))
	}
	for _, c := range refusedCases {
		f.Add(c.in, uint8(sqlx.DOLLAR))
	}
	f.Add(`UPDATE t SET a = :a WHERE b = ? AND c = :c`, uint8(sqlx.QUESTION))
	f.Add(`DELETE FROM t WHERE id = :id`, uint8(sqlx.AT))
	f.Add(`DELETE FROM t WHERE id = :id`, uint8(sqlx.NAMED))
	f.Fuzz(func(t *testing.T, q string, bind uint8) {
		spec := Spec{VersionColumn: "version", VersionParam: "version", BindType: int(bind % 5)}
		g, err := Rewrite(q, spec)
		if err != nil {
			var re *RewriteError
			if !errors.As(err, &re) || !errors.Is(err, ErrRewrite) {
				t.Fatalf("untyped refusal %T: %v", err, err)
			}
			known := false
			for _, k := range reasonKinds {
				if re.Kind == k {
					known = true
				}
			}
			if !known || g != nil {
				t.Fatalf("refusal with kind %v, statement %v", re.Kind, g)
			}
			if re.Offset < -1 || re.Offset > len(q) {
				t.Fatalf("offset %d out of range", re.Offset)
			}
			return
		}
		checkGuarded(t, q, g, spec)
		// Rewriting an UPDATE's output again must be refused: it assigns
		// the version column now.
		if g.Op == "update" {
			if _, err := Rewrite(g.Named, spec); KindOf(err) != kindVersionAssigned {
				t.Fatalf("rewriting the output again: %v\n%s", err, g.Named)
			}
		}
	})
}
