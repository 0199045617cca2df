package sqlxhelpers

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlock/sqlock/internal/testing/pgtest"
)

// The tables the rewriter's test statements use. orders has a version
// column too, so an unqualified version in UPDATE … FROM orders would be
// ambiguous: the rewrite must qualify it.
const rewriteDDL = `
CREATE TABLE accounts (
	id bigint PRIMARY KEY, owner text, balance bigint, version integer NOT NULL DEFAULT 0,
	flag boolean, tags text[], meta jsonb, "where" text, "own""er" text,
	"from" text, "distinct" bigint, "returning" text, "order" bigint);
CREATE TABLE orders (id bigint, account bigint, amount bigint, version integer NOT NULL DEFAULT 0);
CREATE TABLE "Accounts" (id bigint, "own""er" text, version integer NOT NULL DEFAULT 0);
INSERT INTO accounts (id, owner, balance, flag, tags, meta) VALUES
	(1, 'ann', 100, false, '{a,b}', '{"vip": true}'), (2, 'bob', 200, true, '{b}', '{}'), (3, 'ann', 300, NULL, NULL, NULL);
INSERT INTO orders VALUES (1, 1, 10, 0), (2, 3, 10, 0);
INSERT INTO "Accounts" VALUES (1, 'ann', 0);`

// paramValues are the values EXECUTE passes, by parameter name, as untyped
// literals PostgreSQL coerces to each parameter's inferred type.
var paramValues = map[string]string{
	"id": "'1'", "owner": "'ann'", "balance": "'5'", "amount": "'10'", "order": "'1'",
	"lo": "'0'", "hi": "'1000'", "meta": `'{"x": 1}'`, "delta": "'1'", "name": "'ann'",
}

// positional turns :name parameters into $1, $2 … with the rewriter's own
// lexer, so that an input can be PREPAREd as it is.
func positional(q string) (string, []string, bool) {
	toks, err := lex(q, nil)
	if err != nil {
		return "", nil, false
	}
	var b strings.Builder
	var names []string
	pos := 0
	for _, t := range toks {
		if t.kind == tkParam {
			b.WriteString(q[pos:t.start])
			names = append(names, t.name)
			b.WriteString("$" + strconv.Itoa(len(names)))
			pos = int(t.end)
		}
	}
	b.WriteString(q[pos:])
	return b.String(), names, true
}

// genStatement builds a random valid UPDATE or DELETE over the tables of
// rewriteDDL: aliases, schema-qualified and ONLY targets, FROM/USING joins,
// CTEs, tricky strings, comments, dollar quotes, subqueries, casts, OR
// conditions, RETURNING, random keyword case and spacing.
func genStatement(r *rand.Rand) string {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	kw := func(s string) string {
		switch r.IntN(3) {
		case 0:
			return strings.ToLower(s)
		case 1:
			return s
		}
		return strings.ToUpper(s[:1]) + strings.ToLower(s[1:])
	}
	sp := func() string { return pick(" ", " ", " ", "\n\t", " /* c; ' */ ", " -- note ' :x\n", "  ") }
	var b strings.Builder
	cte := r.IntN(4) == 0
	if cte {
		b.WriteString(kw("WITH") + " o2 " + kw("AS") + " (" + kw("SELECT") + " account, amount " + kw("FROM") +
			" orders " + kw("WHERE") + " amount > :amount" + pick("", " "+kw("FOR")+" "+kw("UPDATE")) + ")" + sp())
	}
	update := r.IntN(2) == 0
	table, q := pick("accounts", "public.accounts", "ONLY accounts"), "accounts"
	if strings.HasPrefix(table, "ONLY") {
		table = kw("ONLY") + " accounts"
	}
	if table == "public.accounts" && r.IntN(2) == 0 {
		q = "public.accounts"
	}
	switch r.IntN(3) {
	case 0:
		table += " a"
		q = "a"
	case 1:
		table += " " + kw("AS") + " a"
		q = "a"
	}
	join := r.IntN(3) == 0
	if update {
		b.WriteString(kw("UPDATE") + " " + table + sp() + kw("SET") + " ")
		// one group per assigned column: a column is assigned at most once
		items := [][]string{
			{"balance = :balance", "balance = balance + :balance", "balance = :balance::bigint * 2",
				"balance = (" + kw("SELECT") + " max(amount) " + kw("FROM") + " orders " + kw("WHERE") + " orders.account = :id)"},
			{"owner = 'it''s ; -- :x WHERE'", "owner = $$ WHERE ; $$", `owner = E'\\'' WHERE\\\\'`, "owner = upper(:owner)"},
			{"flag = balance " + kw("IS") + " " + kw("DISTINCT") + " " + kw("FROM") + " :balance"},
			{"tags[1] = :owner"},
			{`meta = '{"a":1}'::jsonb`},
			{`"where" = /* c */ :owner`},
			{`"own""er" = $t$ :owner $t$`},
		}
		r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		n := 1 + r.IntN(3)
		for i := range n {
			if i > 0 {
				b.WriteString("," + sp())
			}
			b.WriteString(items[i][r.IntN(len(items[i]))])
		}
		if join {
			b.WriteString(sp() + kw("FROM") + " orders o")
		}
	} else {
		b.WriteString(kw("DELETE") + " " + kw("FROM") + " " + table)
		if join {
			b.WriteString(sp() + kw("USING") + " orders o")
		}
	}
	b.WriteString(sp() + kw("WHERE") + sp())
	conds := []string{
		q + ".id = :id", q + ".owner = :owner " + kw("OR") + " " + q + ".balance > 0",
		q + ".id " + kw("IN") + " (" + kw("SELECT") + " account " + kw("FROM") + " orders " + kw("WHERE") + " amount = :amount)",
		q + ".owner <> 'a;b'", q + ".meta ? 'vip'", kw("NOT") + " (" + q + ".flag)",
		q + ".balance " + kw("BETWEEN") + " :lo " + kw("AND") + " :hi", q + ".owner " + kw("LIKE") + " '%' || :owner",
		"(" + q + ".id = 1 " + kw("OR") + " " + q + ".id = 2)", q + ".tags[1 : 2] = " + kw("ARRAY") + "['a', 'b']",
		kw("true"), q + ".from " + kw("IS") + " " + kw("NULL"), q + ".distinct " + kw("IS") + " " + kw("NULL"),
	}
	if join {
		conds = append(conds, "o.account = "+q+".id")
	}
	if cte {
		conds = append(conds, q+".id "+kw("IN")+" ("+kw("SELECT")+" account "+kw("FROM")+" o2)")
	}
	r.Shuffle(len(conds), func(i, j int) { conds[i], conds[j] = conds[j], conds[i] })
	n := 1 + r.IntN(3)
	for i := range n {
		if i > 0 {
			b.WriteString(sp() + pick(kw("AND"), kw("OR")) + sp())
		}
		b.WriteString(conds[i])
	}
	if r.IntN(3) == 0 {
		b.WriteString(sp() + kw("RETURNING") + " " + pick("*", q+".id", q+".balance, "+q+".owner", q+".returning, "+q+".order"))
	}
	if r.IntN(5) == 0 {
		b.WriteString(pick(";", " ;", ";\n", "; -- end"))
	}
	if r.IntN(6) == 0 {
		b.WriteString(pick(" -- trailing :note", " /* trailing */"))
	}
	return b.String()
}

// execSimple runs sql with the simple protocol and returns its last command
// tag.
func execSimple(ctx context.Context, conn *pgx.Conn, sql string) (pgconn.CommandTag, error) {
	res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return res[len(res)-1].CommandTag, nil
}

// TestRewriteParsesInPostgres checks the rewrite against the real parser and
// executor. For every accepted table case, every generated statement, and
// every input of the fuzz corpus and seeds that PostgreSQL itself accepts
// (with :name turned into $n), the guarded output must PREPARE too; and,
// executed inside a rolled-back transaction, the guarded statement must
// affect exactly the rows the original affects when the version matches
// (all rows are at version 0), and no row when it does not.
func TestRewriteParsesInPostgres(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	d.Exec(rewriteDDL)
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	var inputs []string
	for _, c := range acceptedCases {
		inputs = append(inputs, c.in)
	}
	r := rand.New(rand.NewPCG(7, 11))
	const generated = 400
	for range generated {
		inputs = append(inputs, genStatement(r))
	}
	corpusFrom := len(inputs)
	inputs = append(inputs, fuzzCorpus(t)...)
	for _, c := range refusedCases {
		inputs = append(inputs, c.in)
	}

	checked, corpusChecked, compared := 0, 0, 0
	for i, in := range inputs {
		mustAccept := i < corpusFrom
		orig, names, ok := positional(in)
		if !ok {
			if mustAccept {
				t.Fatalf("input does not lex: %s", in)
			}
			continue
		}
		if _, err := execSimple(ctx, conn, "PREPARE orig AS "+orig); err != nil {
			if mustAccept {
				t.Fatalf("input %d is not valid SQL (%v):\n%s", i, err, in)
			}
			continue // not SQL PostgreSQL accepts: nothing to compare
		}
		g, rerr := Rewrite(in, pgSpec)
		if rerr != nil {
			if mustAccept {
				t.Fatalf("Rewrite refused %q: %v", in, rerr)
			}
			execSimple(ctx, conn, "DEALLOCATE orig")
			continue
		}
		checkGuarded(t, in, g, pgSpec)
		if _, err := execSimple(ctx, conn, "PREPARE guarded AS "+g.SQL); err != nil {
			t.Fatalf("guarded statement does not PREPARE (%v):\n in: %s\nout: %s", err, in, g.SQL)
		}
		args := func(version string) (string, bool) {
			vals := make([]string, 0, len(g.Params))
			for j, n := range g.Params {
				if j == g.VersionArg {
					vals = append(vals, version)
					continue
				}
				v, ok := paramValues[n]
				if !ok {
					return "", false
				}
				vals = append(vals, v)
			}
			return "(" + strings.Join(vals, ", ") + ")", true
		}
		run := func(stmt, args string) int64 {
			t.Helper()
			if _, err := execSimple(ctx, conn, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			defer execSimple(ctx, conn, "ROLLBACK")
			tag, err := execSimple(ctx, conn, "EXECUTE "+stmt+args)
			if err != nil {
				t.Fatalf("EXECUTE %s%s (%v):\n in: %s\nout: %s", stmt, args, err, in, g.SQL)
			}
			return tag.RowsAffected()
		}
		if match, ok := args("'0'"); ok {
			origArgs := "" // the original has no version parameter
			if len(names) > 0 {
				vals := make([]string, len(names))
				for j, n := range names {
					vals[j] = paramValues[n]
				}
				origArgs = "(" + strings.Join(vals, ", ") + ")"
			}
			want := run("orig", origArgs)
			if got := run("guarded", match); got != want {
				t.Fatalf("guarded statement affected %d rows, the original %d:\n in: %s\nout: %s", got, want, in, g.SQL)
			}
			miss, _ := args("'99'")
			if got := run("guarded", miss); got != 0 {
				t.Fatalf("guarded statement with a wrong version affected %d rows:\n%s", got, g.SQL)
			}
			compared++
		}
		for _, s := range []string{"DEALLOCATE orig", "DEALLOCATE guarded"} {
			if _, err := execSimple(ctx, conn, s); err != nil {
				t.Fatal(err)
			}
		}
		checked++
		if i >= corpusFrom {
			corpusChecked++
		}
	}
	t.Logf("%d statements PREPAREd before and after the rewrite (%d from the fuzz corpus), %d of them executed and compared",
		checked, corpusChecked, compared)
	if checked < len(acceptedCases)+generated || compared < checked*9/10 {
		t.Fatalf("only %d statements checked", checked)
	}
}

// fuzzCorpus returns the inputs stored in testdata/fuzz/FuzzRewrite.
func fuzzCorpus(t *testing.T) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzRewrite", "*"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		q, ok := corpusString(string(b))
		if !ok {
			t.Fatalf("cannot read corpus file %s", f)
		}
		out = append(out, q)
	}
	return out
}

// corpusString extracts the first string(...) value of a "go test fuzz v1"
// corpus file.
func corpusString(s string) (string, bool) {
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(line, "string("); ok {
			v = strings.TrimSuffix(v, ")")
			q, err := strconv.Unquote(v)
			if err != nil {
				return "", false
			}
			return q, true
		}
	}
	return "", false
}

// TestRewriteKeywordLabelsParseInPostgres: a keyword used as a column label
// after a dot (o.from, o.distinct, o.returning, o.order — valid PostgreSQL)
// is read as a label, not as the clause keyword, and the guarded statement
// PREPAREs and runs on PostgreSQL.
func TestRewriteKeywordLabelsParseInPostgres(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	d.Exec(rewriteDDL)
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	n := 0
	for _, c := range acceptedCases {
		if !strings.Contains(c.name, "keyword label") {
			continue
		}
		n++
		g, rerr := Rewrite(c.in, pgSpec)
		if rerr != nil {
			t.Fatalf("%s: %v", c.name, rerr)
		}
		if _, err := execSimple(ctx, conn, "PREPARE g AS "+g.SQL); err != nil {
			t.Fatalf("%s: guarded statement does not PREPARE (%v):\n%s", c.name, err, g.SQL)
		}
		vals := make([]string, len(g.Params))
		for j, p := range g.Params {
			vals[j] = paramValues[p]
			if j == g.VersionArg {
				vals[j] = "'0'"
			}
		}
		execSimple(ctx, conn, "BEGIN")
		if _, err := execSimple(ctx, conn, "EXECUTE g("+strings.Join(vals, ", ")+")"); err != nil {
			t.Fatalf("%s: EXECUTE: %v\n%s", c.name, err, g.SQL)
		}
		execSimple(ctx, conn, "ROLLBACK")
		execSimple(ctx, conn, "DEALLOCATE g")
	}
	if n < 5 {
		t.Fatalf("only %d keyword-label cases", n)
	}
}

// TestRewriteRefusesOnlyWithStar: UPDATE ONLY t * and DELETE FROM ONLY t *,
// which PostgreSQL rejects, are refused (kindSyntax) rather than guarded.
func TestRewriteRefusesOnlyWithStar(t *testing.T) {
	ctx := context.Background()
	d := pgtest.New(t)
	d.Exec(rewriteDDL)
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`UPDATE ONLY accounts * SET balance = 1 WHERE id = :id`,
		`DELETE FROM ONLY accounts * WHERE id = :id`,
		`UPDATE ONLY public.accounts * AS a SET balance = 1 WHERE a.id = :id`,
	} {
		orig, _, _ := positional(q)
		if _, err := execSimple(ctx, conn, "PREPARE o AS "+orig); err == nil {
			t.Fatalf("PostgreSQL accepts %s", q)
		}
		if _, err := Rewrite(q, pgSpec); KindOf(err) != kindSyntax {
			t.Fatalf("Rewrite(%q) = %v, want kindSyntax", q, err)
		}
	}
	// Either one alone is fine.
	for _, q := range []string{`UPDATE ONLY accounts SET balance = 1 WHERE id = :id`, `DELETE FROM accounts * WHERE id = :id`} {
		if _, err := Rewrite(q, pgSpec); err != nil {
			t.Fatalf("Rewrite(%q): %v", q, err)
		}
	}
}
