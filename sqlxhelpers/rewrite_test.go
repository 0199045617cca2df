package sqlxhelpers

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/vmodel"
)

var pgSpec = Spec{VersionColumn: "version", VersionParam: "version", BindType: sqlx.DOLLAR}

// acceptedCases are statements the rewriter guards, with the exact named
// output. They are also the seed corpus of FuzzRewrite and are all PREPAREd
// against PostgreSQL (before and after the rewrite) by TestRewriteParsesInPostgres.
var acceptedCases = []struct {
	name, in, out string
}{
	{"plain update",
		`UPDATE accounts SET balance = :balance WHERE id = :id`,
		`UPDATE accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"plain delete",
		`DELETE FROM accounts WHERE id = :id`,
		`DELETE FROM accounts WHERE (id = :id) AND "version" = :version`},
	{"OR is parenthesised",
		`UPDATE accounts SET balance = :balance WHERE id = :id OR owner = :owner`,
		`UPDATE accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id OR owner = :owner) AND "version" = :version`},
	{"lower case keywords and trailing semicolon",
		"update accounts set balance = balance + :balance where id = :id;\n",
		`update accounts set balance = balance + :balance, "version" = "version" + 1 where (id = :id) AND "version" = :version`},
	{"several assignments and a cast",
		`UPDATE accounts SET balance = :balance::bigint, owner = upper(:owner) WHERE id = :id`,
		`UPDATE accounts SET balance = :balance::bigint, owner = upper(:owner), "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"multi-column assignment",
		`UPDATE accounts SET (balance, owner) = (:balance, :owner) WHERE id = :id`,
		`UPDATE accounts SET (balance, owner) = (:balance, :owner), "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"strings with quotes, colons and keywords",
		`UPDATE accounts SET owner = 'it''s :owner WHERE x; --' WHERE id = :id AND owner <> 'a;b'`,
		`UPDATE accounts SET owner = 'it''s :owner WHERE x; --', "version" = "version" + 1 WHERE (id = :id AND owner <> 'a;b') AND "version" = :version`},
	{"escape string with backslash-quote",
		`UPDATE accounts SET owner = E'a\' WHERE b\\' WHERE id = :id`,
		`UPDATE accounts SET owner = E'a\' WHERE b\\', "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"quoted identifiers with doubled quotes",
		`UPDATE "Accounts" SET "own""er" = :owner WHERE "id" = :id`,
		`UPDATE "Accounts" SET "own""er" = :owner, "version" = "version" + 1 WHERE ("id" = :id) AND "version" = :version`},
	{"line comment at the end",
		"UPDATE accounts SET balance = :balance WHERE id = :id -- pay :owner",
		`UPDATE accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version -- pay :owner`},
	{"line comment inside WHERE",
		"DELETE FROM accounts WHERE id = :id -- first\n OR owner = :owner",
		"DELETE FROM accounts WHERE (id = :id -- first\n OR owner = :owner) AND \"version\" = :version"},
	{"nested block comments",
		`UPDATE accounts /* SET x = 1 /* WHERE */ ; */ SET balance = :balance WHERE /* c */ id = :id /* done */`,
		`UPDATE accounts /* SET x = 1 /* WHERE */ ; */ SET balance = :balance, "version" = "version" + 1 WHERE /* c */ (id = :id) AND "version" = :version /* done */`},
	{"dollar quotes",
		`UPDATE accounts SET owner = $$ WHERE ; ' $$ || $t$ $$ :x $t$ WHERE id = :id`,
		`UPDATE accounts SET owner = $$ WHERE ; ' $$ || $t$ $$ :x $t$, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"subquery with its own WHERE",
		`UPDATE accounts SET balance = (SELECT max(balance) FROM accounts WHERE owner = :owner) WHERE id = :id`,
		`UPDATE accounts SET balance = (SELECT max(balance) FROM accounts WHERE owner = :owner), "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"subquery in WHERE",
		`DELETE FROM accounts WHERE id IN (SELECT id FROM accounts WHERE owner = :owner) AND id = :id`,
		`DELETE FROM accounts WHERE (id IN (SELECT id FROM accounts WHERE owner = :owner) AND id = :id) AND "version" = :version`},
	{"RETURNING",
		`UPDATE accounts SET balance = :balance WHERE id = :id RETURNING balance, version`,
		`UPDATE accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version RETURNING balance, version`},
	{"DELETE RETURNING",
		`DELETE FROM accounts WHERE id = :id RETURNING *`,
		`DELETE FROM accounts WHERE (id = :id) AND "version" = :version RETURNING *`},
	{"UPDATE FROM qualifies the version column",
		`UPDATE accounts SET balance = o.amount FROM orders o WHERE o.account = accounts.id AND o.id = :order`,
		`UPDATE accounts SET balance = o.amount, "version" = accounts."version" + 1 FROM orders o WHERE (o.account = accounts.id AND o.id = :order) AND accounts."version" = :version`},
	{"UPDATE alias FROM",
		`UPDATE accounts AS a SET balance = o.amount FROM orders o WHERE o.account = a.id AND o.id = :order RETURNING a.balance`,
		`UPDATE accounts AS a SET balance = o.amount, "version" = a."version" + 1 FROM orders o WHERE (o.account = a.id AND o.id = :order) AND a."version" = :version RETURNING a.balance`},
	{"DELETE USING",
		`DELETE FROM accounts a USING orders o WHERE o.account = a.id AND o.id = :order`,
		`DELETE FROM accounts a USING orders o WHERE (o.account = a.id AND o.id = :order) AND a."version" = :version`},
	{"schema-qualified ONLY target",
		`UPDATE ONLY public.accounts SET balance = :balance WHERE id = :id`,
		`UPDATE ONLY public.accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"IS DISTINCT FROM in SET is not a FROM clause",
		`UPDATE accounts SET flag = balance IS DISTINCT FROM :balance WHERE id = :id`,
		`UPDATE accounts SET flag = balance IS DISTINCT FROM :balance, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"read-only CTE",
		`WITH o AS (SELECT account, amount FROM orders WHERE id = :order FOR UPDATE) UPDATE accounts SET balance = balance + (SELECT amount FROM o) WHERE id = (SELECT account FROM o)`,
		`WITH o AS (SELECT account, amount FROM orders WHERE id = :order FOR UPDATE) UPDATE accounts SET balance = balance + (SELECT amount FROM o), "version" = "version" + 1 WHERE (id = (SELECT account FROM o)) AND "version" = :version`},
	{"array subscript and slice",
		`UPDATE accounts SET tags[1] = :owner WHERE tags[1 : 2] = ARRAY[:owner] AND id = :id`,
		`UPDATE accounts SET tags[1] = :owner, "version" = "version" + 1 WHERE (tags[1 : 2] = ARRAY[:owner] AND id = :id) AND "version" = :version`},
	{"jsonb ? operator with dollar binds",
		`UPDATE accounts SET meta = meta || :meta WHERE meta ? 'vip' AND id = :id`,
		`UPDATE accounts SET meta = meta || :meta, "version" = "version" + 1 WHERE (meta ? 'vip' AND id = :id) AND "version" = :version`},
	{"a column named like a keyword, quoted",
		`UPDATE accounts SET "where" = :owner WHERE id = :id`,
		`UPDATE accounts SET "where" = :owner, "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
	{"IS NOT DISTINCT FROM in WHERE",
		`DELETE FROM accounts WHERE owner IS NOT DISTINCT FROM :owner`,
		`DELETE FROM accounts WHERE (owner IS NOT DISTINCT FROM :owner) AND "version" = :version`},
	{"no space around WHERE's parenthesis",
		`UPDATE accounts SET balance=0 WHERE(id=:id)RETURNING id`,
		`UPDATE accounts SET balance=0, "version" = "version" + 1 WHERE((id=:id)) AND "version" = :version RETURNING id`},
	{"keyword labels after a dot in SET and WHERE",
		`UPDATE accounts a SET balance = a.distinct WHERE a.from = :owner AND a.id = :id`,
		`UPDATE accounts a SET balance = a.distinct, "version" = "version" + 1 WHERE (a.from = :owner AND a.id = :id) AND "version" = :version`},
	{"keyword label before a FROM clause",
		`UPDATE accounts a SET owner = a.from, balance = a.distinct FROM orders o WHERE o.account = a.id AND a.returning IS NULL RETURNING a.where`,
		`UPDATE accounts a SET owner = a.from, balance = a.distinct, "version" = a."version" + 1 FROM orders o WHERE (o.account = a.id AND a.returning IS NULL) AND a."version" = :version RETURNING a.where`},
	{"keyword label that would end the WHERE condition",
		`DELETE FROM accounts a WHERE a.returning = :owner`,
		`DELETE FROM accounts a WHERE (a.returning = :owner) AND "version" = :version`},
	{"keyword labels with spaces around the dot",
		`DELETE FROM accounts a USING orders o WHERE o.account = a . id AND a . returning = :owner RETURNING a . distinct`,
		`DELETE FROM accounts a USING orders o WHERE (o.account = a . id AND a . returning = :owner) AND a."version" = :version RETURNING a . distinct`},
	{"keyword label as a table name",
		`UPDATE public.accounts SET balance = accounts.distinct WHERE accounts.order IS NULL AND id = :id`,
		`UPDATE public.accounts SET balance = accounts.distinct, "version" = "version" + 1 WHERE (accounts.order IS NULL AND id = :id) AND "version" = :version`},
	{"unicode and E strings",
		`UPDATE accounts SET owner = U&'d\0061t' || e'\n' WHERE id = :id`,
		`UPDATE accounts SET owner = U&'d\0061t' || e'\n', "version" = "version" + 1 WHERE (id = :id) AND "version" = :version`},
}

// refusedCases are statements the rewriter must refuse, with the reason.
var refusedCases = []struct {
	name, in string
	kind     string
}{
	{"empty", "", kindNotWrite},
	{"only a comment", "-- nothing", kindNotWrite},
	{"insert", `INSERT INTO accounts (id) VALUES (:id)`, kindNotWrite},
	{"select", `SELECT * FROM accounts WHERE id = :id`, kindNotWrite},
	{"merge", `MERGE INTO accounts a USING orders o ON o.account = a.id WHEN MATCHED THEN DELETE`, kindNotWrite},
	{"parenthesised", `(UPDATE accounts SET balance = 1 WHERE id = :id)`, kindNotWrite},
	{"update without WHERE", `UPDATE accounts SET balance = :balance`, kindNoWhere},
	{"delete without WHERE", `DELETE FROM accounts`, kindNoWhere},
	{"WHERE only in a subquery", `UPDATE accounts SET balance = (SELECT 1 WHERE true)`, kindNoWhere},
	{"WHERE only in a string", `UPDATE accounts SET owner = 'WHERE id = 1'`, kindNoWhere},
	{"WHERE only in a comment", "UPDATE accounts SET balance = 1 -- WHERE id = 1", kindNoWhere},
	{"WHERE only in a dollar quote", `UPDATE accounts SET owner = $x$ WHERE id = 1 $x$`, kindNoWhere},
	{"RETURNING before WHERE", `UPDATE accounts SET balance = 1 RETURNING id`, kindNoWhere},
	{"UPDATE FROM without WHERE", `UPDATE accounts SET balance = o.amount FROM orders o`, kindNoWhere},
	{"two statements", `UPDATE accounts SET balance = 1 WHERE id = :id; DELETE FROM accounts`, kindMultipleStatements},
	{"two semicolons", `DELETE FROM accounts WHERE id = :id;;`, kindMultipleStatements},
	{"assigns version", `UPDATE accounts SET balance = 1, version = :version + 1 WHERE id = :id`, kindVersionAssigned},
	{"assigns VERSION unquoted upper case", `UPDATE accounts SET VERSION = 7 WHERE id = :id`, kindVersionAssigned},
	{"assigns quoted version", `UPDATE accounts SET "version" = 7 WHERE id = :id`, kindVersionAssigned},
	{"assigns version in a column list", `UPDATE accounts SET (balance, version) = (1, 2) WHERE id = :id`, kindVersionAssigned},
	{"assigns version through a unicode escape", `UPDATE accounts SET U&"\0076ersion" = 2 WHERE id = :id`, kindVersionAssigned},
	{"data-modifying CTE", `WITH d AS (DELETE FROM orders RETURNING account) UPDATE accounts SET balance = 0 WHERE id IN (SELECT account FROM d)`, kindCTE},
	{"CTE with an UPDATE inside a subquery", `WITH d AS (SELECT * FROM (UPDATE orders SET amount = 0 RETURNING *) x) DELETE FROM accounts WHERE id = :id`, kindCTE},
	{"CTE with SEARCH", `WITH RECURSIVE t(n) AS (SELECT 1) SEARCH DEPTH FIRST BY n SET ord DELETE FROM accounts WHERE id = :id`, kindCTE},
	{"CTE without AS", `WITH t (SELECT 1) DELETE FROM accounts WHERE id = :id`, kindCTE},
	{"CTE then SELECT", `WITH t AS (SELECT 1) SELECT * FROM t`, kindNotWrite},
	{"unterminated string", `UPDATE accounts SET owner = 'abc WHERE id = :id`, kindUnbalanced},
	{"unterminated quoted identifier", `UPDATE accounts SET "owner = 1 WHERE id = :id`, kindUnbalanced},
	{"unterminated comment", `UPDATE accounts SET owner = 1 WHERE id = :id /* /* */`, kindUnbalanced},
	{"unterminated dollar quote", `UPDATE accounts SET owner = $a$ x $b$ WHERE id = :id`, kindUnbalanced},
	{"unbalanced parenthesis", `UPDATE accounts SET balance = (1 WHERE id = :id`, kindUnbalanced},
	{"closing parenthesis that closes the guard", `UPDATE accounts SET balance = 1 WHERE id = :id) OR (true`, kindUnbalanced},
	{"mismatched brackets", `UPDATE accounts SET tags[1) = 1 WHERE id = :id`, kindUnbalanced},
	{"positional parameter", `UPDATE accounts SET balance = $1 WHERE id = :id`, kindPositional},
	{"backslash in a standard string", `UPDATE accounts SET owner = 'a\' WHERE id = :id -- '`, kindAmbiguousString},
	{"backslash in a national string", `UPDATE accounts SET owner = N'a\' WHERE id = :id -- '`, kindAmbiguousString},
	{"WHERE CURRENT OF", `UPDATE accounts SET balance = 1 WHERE CURRENT OF c`, kindUnsupported},
	{"ORDER BY after WHERE", `DELETE FROM accounts WHERE id = :id ORDER BY id`, kindUnsupported},
	{"LIMIT after WHERE", `UPDATE accounts SET balance = 1 WHERE id = :id LIMIT 1`, kindUnsupported},
	{"UNION in WHERE", `DELETE FROM accounts WHERE id = :id UNION SELECT 1`, kindUnsupported},
	{"DELETE without FROM", `DELETE accounts WHERE id = :id`, kindSyntax},
	{"no SET", `UPDATE accounts WHERE id = :id`, kindSyntax},
	{"empty SET list", `UPDATE accounts SET WHERE id = :id`, kindSyntax},
	{"trailing comma in SET", `UPDATE accounts SET balance = 1, WHERE id = :id`, kindSyntax},
	{"assignment without =", `UPDATE accounts SET balance WHERE id = :id`, kindSyntax},
	{"empty WHERE", `UPDATE accounts SET balance = 1 WHERE`, kindSyntax},
	{"empty WHERE before RETURNING", `DELETE FROM accounts WHERE RETURNING *`, kindSyntax},
	{"parameter as table", `UPDATE :tbl SET balance = 1 WHERE id = :id`, kindSyntax},
	{"stray dollar", `UPDATE accounts SET balance = $ WHERE id = :id`, kindSyntax},
	{"NUL byte", "UPDATE accounts SET balance = 1 WHERE id = :id\x00", kindSyntax},
	{"ONLY with a star", `UPDATE ONLY accounts * SET balance = 1 WHERE id = :id`, kindSyntax},
	{"DELETE ONLY with a star", `DELETE FROM ONLY accounts * WHERE id = :id`, kindSyntax},
	{"extra word before WHERE", `DELETE FROM accounts a b WHERE id = :id`, kindSyntax},
}

func TestRewriteAccepted(t *testing.T) {
	for _, c := range acceptedCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Rewrite(c.in, pgSpec)
			if err != nil {
				t.Fatalf("Rewrite(%q): %v", c.in, err)
			}
			if g.Named != c.out {
				t.Errorf("Rewrite(%q)\n got: %s\nwant: %s", c.in, g.Named, c.out)
			}
			checkGuarded(t, c.in, g, pgSpec)
		})
	}
}

func TestRewriteRefused(t *testing.T) {
	for _, c := range refusedCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Rewrite(c.in, pgSpec)
			if err == nil {
				t.Fatalf("Rewrite(%q) accepted: %s", c.in, g.Named)
			}
			if g != nil {
				t.Errorf("a refusal returned a statement")
			}
			var re *RewriteError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RewriteError: %v", err, err)
			}
			if !errors.Is(err, ErrRewrite) || KindOf(err) != c.kind {
				t.Errorf("Rewrite(%q) = %v (kind %v), want kind %v", c.in, err, re.Kind, c.kind)
			}
			if re.Query != c.in {
				t.Errorf("RewriteError.Query = %q", re.Query)
			}
			if re.Offset > len(c.in) {
				t.Errorf("offset %d past the end", re.Offset)
			}
		})
	}
}

func TestRewriteBindTypes(t *testing.T) {
	const q = `UPDATE accounts SET balance = :balance WHERE id = :id AND owner = :owner`
	for _, c := range []struct {
		bind int
		want string
	}{
		{sqlx.DOLLAR, `UPDATE accounts SET balance = $1, "version" = "version" + 1 WHERE (id = $2 AND owner = $3) AND "version" = $4`},
		{sqlx.QUESTION, `UPDATE accounts SET balance = ?, "version" = "version" + 1 WHERE (id = ? AND owner = ?) AND "version" = ?`},
		{sqlx.UNKNOWN, `UPDATE accounts SET balance = ?, "version" = "version" + 1 WHERE (id = ? AND owner = ?) AND "version" = ?`},
		{sqlx.AT, `UPDATE accounts SET balance = @p1, "version" = "version" + 1 WHERE (id = @p2 AND owner = @p3) AND "version" = @p4`},
		{sqlx.NAMED, `UPDATE accounts SET balance = :balance, "version" = "version" + 1 WHERE (id = :id AND owner = :owner) AND "version" = :version`},
	} {
		g, err := Rewrite(q, Spec{VersionColumn: "version", VersionParam: "version", BindType: c.bind})
		if err != nil {
			t.Fatal(err)
		}
		if g.SQL != c.want {
			t.Errorf("bind %d:\n got: %s\nwant: %s", c.bind, g.SQL, c.want)
		}
		if want := []string{"balance", "id", "owner", "version"}; strings.Join(g.Params, ",") != strings.Join(want, ",") || g.VersionArg != 3 {
			t.Errorf("params %v, version arg %d", g.Params, g.VersionArg)
		}
	}
	// '?' is the bind variable of QUESTION drivers: refused there, an
	// operator for PostgreSQL.
	const jq = `UPDATE accounts SET a = 1 WHERE meta ? 'vip' AND id = :id`
	if _, err := Rewrite(jq, Spec{VersionColumn: "version", VersionParam: "version", BindType: sqlx.QUESTION}); KindOf(err) != kindPositional {
		t.Errorf("'?' with QUESTION binds: %v", err)
	}
	if _, err := Rewrite(jq, pgSpec); err != nil {
		t.Errorf("'?' with DOLLAR binds: %v", err)
	}
}

func TestRewriteSpec(t *testing.T) {
	q := `DELETE FROM t WHERE id = :id`
	for _, s := range []Spec{
		{VersionColumn: "", VersionParam: "v", BindType: sqlx.DOLLAR},
		{VersionColumn: "a\x00b", VersionParam: "v", BindType: sqlx.DOLLAR},
		{VersionColumn: "v", VersionParam: "", BindType: sqlx.DOLLAR},
		{VersionColumn: "v", VersionParam: "1v", BindType: sqlx.DOLLAR},
		{VersionColumn: "v", VersionParam: "v.", BindType: sqlx.DOLLAR},
		{VersionColumn: "v", VersionParam: "a b", BindType: sqlx.DOLLAR},
		{VersionColumn: "v", VersionParam: "v", BindType: 99},
	} {
		if _, err := Rewrite(q, s); KindOf(err) != kindSpec || !errors.Is(err, ErrRewrite) {
			t.Errorf("spec %+v: %v", s, err)
		}
	}
	// A version column that needs quoting is quoted; a qualified param works.
	g, err := Rewrite(q, Spec{VersionColumn: `Lock "Rev"`, VersionParam: "meta.rev", BindType: sqlx.DOLLAR})
	if err != nil {
		t.Fatal(err)
	}
	if want := `DELETE FROM t WHERE (id = :id) AND "Lock ""Rev""" = :meta.rev`; g.Named != want {
		t.Errorf("got %s", g.Named)
	}
	// The version column is compared exactly: a column that folds to
	// another name is not the version column.
	if _, err := Rewrite(`UPDATE t SET Rev = 1 WHERE id = :id`, Spec{VersionColumn: "Rev", VersionParam: "rev", BindType: sqlx.DOLLAR}); err != nil {
		t.Errorf("Rev (folds to rev) refused as the version column \"Rev\": %v", err)
	}
	if _, err := Rewrite(`UPDATE t SET "Rev" = 1 WHERE id = :id`, Spec{VersionColumn: "Rev", VersionParam: "rev", BindType: sqlx.DOLLAR}); KindOf(err) != kindVersionAssigned {
		t.Errorf(`"Rev" not refused: %v`, err)
	}
}

func TestRewriteOp(t *testing.T) {
	g, err := Rewrite(`DELETE FROM "S"."T" WHERE id = :id`, pgSpec)
	if err != nil {
		t.Fatal(err)
	}
	if g.Op != "delete" || g.Table != `"S"."T"` {
		t.Errorf("op %v table %s", g.Op, g.Table)
	}
	g, err = Rewrite(`update  only  s.t x set a = 1 where b`, pgSpec)
	if err != nil {
		t.Fatal(err)
	}
	if g.Op != "update" || g.Table != "s.t" {
		t.Errorf("op %v table %s", g.Op, g.Table)
	}
}

// checkGuarded asserts the structural properties of an accepted rewrite:
// the output lexes; at its top level there is exactly one WHERE, whose
// condition is "( <the user's condition> ) AND <version> = <param>"; an UPDATE
// assigns the version column exactly once at the top level of its SET list
// (and that assignment is ours, the last one); the input's tokens all appear
// in the output, in order; the bind variables match Params.
func checkGuarded(t testing.TB, in string, g *Guarded, spec Spec) {
	t.Helper()
	toks, lerr := lexDialect(g.Named, nil, spec.MySQL)
	if lerr != nil {
		t.Fatalf("output does not lex: %v\n%s", lerr, g.Named)
	}
	p := parser{q: g.Named, toks: toks, mysql: spec.MySQL}
	var wheres []int
	for i := range toks {
		if p.clauseWord(i) == "where" {
			wheres = append(wheres, i)
		}
	}
	// A WITH clause's top level has no WHERE (it is inside parentheses),
	// so the only top-level WHERE is the statement's.
	if len(wheres) != 1 {
		t.Fatalf("%d top-level WHEREs in %s", len(wheres), g.Named)
	}
	w := wheres[0]
	if toks[w+1].kind != tkLParen {
		t.Fatalf("WHERE not followed by '(': %s", g.Named)
	}
	closeParen := p.closing(w + 1)
	quote := byte('"')
	if spec.MySQL {
		quote = '`'
	}
	qv, _ := vmodel.QuoteIdent("test", "version column", spec.VersionColumn, quote)
	rest := toks[closeParen+1:]
	// ) AND [qual.]"version" = :param
	if len(rest) < 4 || !p.isWord(closeParen+1, "and") {
		t.Fatalf("guard missing after the condition: %s", g.Named)
	}
	j := closeParen + 2
	for j+1 < len(toks) && toks[j+1].kind == tkDot {
		j += 2
	}
	if p.text(j) != qv || p.text(j+1) != "=" || toks[j+2].kind != tkParam || toks[j+2].name != spec.VersionParam {
		t.Fatalf("malformed guard in %s", g.Named)
	}
	if j+3 < len(toks) && p.clauseWord(j+3) != "returning" {
		t.Fatalf("something other than RETURNING after the guard: %s", g.Named)
	}
	// The guard occurs exactly once at the top level.
	guards := 0
	for i := range toks {
		if toks[i].depth == 0 && p.isWord(i, "and") && i > 0 && toks[i-1].kind == tkRParen && toks[i-1].depth == 0 {
			k := i + 1
			for k+1 < len(toks) && toks[k+1].kind == tkDot {
				k += 2
			}
			if k+2 < len(toks) && p.text(k) == qv && toks[k+2].kind == tkParam && toks[k+2].name == spec.VersionParam {
				guards++
			}
		}
	}
	if guards != 1 {
		t.Fatalf("%d top-level guards in %s", guards, g.Named)
	}
	if g.Op == "update" {
		assigns := 0
		for i := 0; i < w; i++ {
			if toks[i].depth == 0 && p.text(i) == qv && i+1 < len(toks) && p.text(i+1) == "=" && (toks[i-1].kind == tkComma) {
				assigns++
			}
		}
		if assigns != 1 {
			t.Fatalf("%d top-level version assignments in %s", assigns, g.Named)
		}
	}
	// Input tokens appear in order in the output.
	inToks, _ := lexDialect(in, nil, spec.MySQL)
	k := 0
	for _, it := range inToks {
		if it.kind == tkSemi && it.depth == 0 {
			break
		}
		want := in[it.start:it.end]
		for k < len(toks) && g.Named[toks[k].start:toks[k].end] != want {
			k++
		}
		if k == len(toks) {
			t.Fatalf("input token %q lost in %s", want, g.Named)
		}
		k++
	}
	// Bind variables: one per parameter, in order.
	params := 0
	for _, tk := range toks {
		if tk.kind == tkParam {
			if params >= len(g.Params) || g.Params[params] != tk.name {
				t.Fatalf("parameter %d is %s, Params %v", params, tk.name, g.Params)
			}
			params++
		}
	}
	if params != len(g.Params) || g.Params[g.VersionArg] != spec.VersionParam {
		t.Fatalf("Params %v VersionArg %d for %s", g.Params, g.VersionArg, g.Named)
	}
}

// One error type for every refusal: each matches ErrRewrite, and valid SQL
// the rewriter does not guard also matches the shared sqlock.ErrUnsupported.
func TestRewriteErrorMatchesErrRewriteAndUnsupported(t *testing.T) {
	_, err := Rewrite(`DELETE FROM t WHERE CURRENT OF c`, pgSpec)
	if !errors.Is(err, ErrRewrite) || !errors.Is(err, sqlock.ErrUnsupported) || KindOf(err) != kindUnsupported {
		t.Fatalf("WHERE CURRENT OF: %v (kind %q)", err, KindOf(err))
	}
	_, err = Rewrite(`DELETE FROM t`, pgSpec)
	if !errors.Is(err, ErrRewrite) || errors.Is(err, sqlock.ErrUnsupported) || KindOf(err) != kindNoWhere {
		t.Fatalf("no WHERE: %v (kind %q)", err, KindOf(err))
	}
}
