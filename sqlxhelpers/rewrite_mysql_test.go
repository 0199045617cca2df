package sqlxhelpers

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock"
	"github.com/sqlock/sqlock/internal/testing/mariatest"
)

var mySpec = Spec{VersionColumn: "version", VersionParam: "version", BindType: sqlx.QUESTION, MySQL: true}

// myAcceptedCases are statements the rewriter guards in MySQL's grammar,
// with the exact named output. TestMySQLNamedExecGuarded runs such
// statements on MariaDB.
var myAcceptedCases = []struct {
	name, in, out string
}{
	{"plain update",
		"UPDATE accounts SET balance = :balance WHERE id = :id",
		"UPDATE accounts SET balance = :balance, `version` = `version` + 1 WHERE (id = :id) AND `version` = :version"},
	{"plain delete",
		"DELETE FROM accounts WHERE id = :id",
		"DELETE FROM accounts WHERE (id = :id) AND `version` = :version"},
	{"backquoted identifiers, with a doubled backquote",
		"UPDATE `my``t` SET `balance` = :balance WHERE `id` = :id",
		"UPDATE `my``t` SET `balance` = :balance, `version` = `version` + 1 WHERE (`id` = :id) AND `version` = :version"},
	{"'#' comment after the condition",
		"UPDATE accounts SET balance = :balance WHERE id = :id # the account\n",
		"UPDATE accounts SET balance = :balance, `version` = `version` + 1 WHERE (id = :id) AND `version` = :version # the account"},
	{"'-- ' comment and a comment that is not executable",
		"DELETE /* gone */ FROM accounts WHERE id = :id -- the account",
		"DELETE /* gone */ FROM accounts WHERE (id = :id) AND `version` = :version -- the account"},
	{"'#' and keywords in a string, doubled quote",
		"UPDATE accounts SET owner = 'it''s # WHERE /*! x */' WHERE id = :id || owner = :owner",
		"UPDATE accounts SET owner = 'it''s # WHERE /*! x */', `version` = `version` + 1 WHERE (id = :id || owner = :owner) AND `version` = :version"},
	{"user variable and := in a subquery",
		"UPDATE accounts SET balance = (SELECT @b := :balance) WHERE id = :id",
		"UPDATE accounts SET balance = (SELECT @b := :balance), `version` = `version` + 1 WHERE (id = :id) AND `version` = :version"},
	{"alias",
		"UPDATE accounts AS a SET a.balance = :balance WHERE a.id = :id",
		"UPDATE accounts AS a SET a.balance = :balance, `version` = `version` + 1 WHERE (a.id = :id) AND `version` = :version"},
}

// myRefusedCases are statements MySQL reads otherwise than PostgreSQL, or
// whose reading depends on sql_mode or the server's version: each is
// refused with the kind given.
var myRefusedCases = []struct {
	name, in, kind string
}{
	{"'#' hides the WHERE", "UPDATE accounts SET balance = :balance # WHERE id = :id\n", kindNoWhere},
	{"executable comment", "UPDATE accounts SET balance = :balance WHERE id = :id /*! OR 1 = 1 */", kindUnsupported},
	{"MariaDB executable comment", "UPDATE accounts SET balance = :balance WHERE id = :id /*M! OR 1 = 1 */", kindUnsupported},
	{"versioned executable comment", "DELETE FROM accounts WHERE id = :id /*!50700 OR 1 = 1 */", kindUnsupported},
	{"nested comment", "UPDATE accounts SET balance = :balance WHERE id = :id /* /* */ OR 1 = 1 */", kindSyntax},
	{"double-quoted token", `UPDATE accounts SET owner = "ann" WHERE id = :id`, kindAmbiguousString},
	{"backslash in a string", `UPDATE accounts SET owner = 'a\' WHERE 1 = 1 -- ' WHERE id = :id`, kindAmbiguousString},
	{"'--' without a space", "UPDATE accounts SET balance = :balance WHERE id = :id --1", kindSyntax},
	{"'$' starting a token", "UPDATE accounts SET balance = $b WHERE id = :id", kindSyntax},
	{"version assigned, other case", "UPDATE accounts SET VERSION = 3 WHERE id = :id", kindVersionAssigned},
	{"version assigned, backquoted", "UPDATE accounts SET `Version` = 3 WHERE id = :id", kindVersionAssigned},
	{"version assigned, qualified", "UPDATE accounts AS a SET a.version = 3 WHERE a.id = :id", kindVersionAssigned},
	{"multiple-table UPDATE", "UPDATE accounts, owners SET accounts.balance = :balance WHERE accounts.id = owners.id", kindSyntax},
	{"UPDATE with JOIN", "UPDATE accounts JOIN owners ON accounts.id = owners.id SET balance = :balance WHERE accounts.id = :id", kindSyntax},
	{"UPDATE … FROM", "UPDATE accounts SET balance = :balance FROM owners WHERE accounts.id = owners.id", kindUnsupported},
	{"DELETE … USING", "DELETE FROM accounts USING accounts JOIN owners WHERE accounts.id = :id", kindUnsupported},
	{"multiple-table DELETE", "DELETE accounts FROM accounts JOIN owners WHERE accounts.id = :id", kindSyntax},
	{"WITH", "WITH c AS (SELECT 1) UPDATE accounts SET balance = :balance WHERE id = :id", kindCTE},
	{"IGNORE", "UPDATE IGNORE accounts SET balance = :balance WHERE id = :id", kindSyntax},
	{"LIMIT", "UPDATE accounts SET balance = :balance WHERE id = :id LIMIT 1", kindUnsupported},
	{"ORDER BY", "DELETE FROM accounts WHERE id = :id ORDER BY id", kindUnsupported},
	{"'?' bind variable", "UPDATE accounts SET balance = :balance WHERE id = ?", kindPositional},
	{"unterminated backquote", "UPDATE `accounts SET balance = :balance WHERE id = :id", kindUnbalanced},
	{"unterminated comment", "UPDATE accounts SET balance = :balance WHERE id = :id /* x", kindUnbalanced},
}

func TestRewriteMySQL(t *testing.T) {
	for _, c := range myAcceptedCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Rewrite(c.in, mySpec)
			if err != nil {
				t.Fatal(err)
			}
			if g.Named != c.out {
				t.Fatalf("got  %s\nwant %s", g.Named, c.out)
			}
			checkGuarded(t, c.in, g, mySpec)
			if strings.Count(g.SQL, "?") != len(g.Params) || strings.Contains(g.SQL, ":version") {
				t.Fatalf("bind variables: %s for %v", g.SQL, g.Params)
			}
		})
	}
}

// TestRewriteMySQLRefusesWhatMySQLReadsOtherwise: what MySQL reads
// otherwise than PostgreSQL (a '#' comment, an executable comment), and
// what it reads one way or another by sql_mode or version ("…", a
// backslash in a string, a nested comment), is refused with the kind
// given, never guarded by a guess.
func TestRewriteMySQLRefusesWhatMySQLReadsOtherwise(t *testing.T) {
	for _, c := range myRefusedCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Rewrite(c.in, mySpec)
			if KindOf(err) != c.kind || g != nil || !errors.Is(err, ErrRewrite) {
				t.Fatalf("got %v (kind %q), want kind %q", err, KindOf(err), c.kind)
			}
			if c.kind == kindUnsupported && !errors.Is(err, sqlock.ErrUnsupported) {
				t.Fatalf("%v does not match sqlock.ErrUnsupported", err)
			}
		})
	}
}

// FuzzRewriteMySQL: the MySQL rewriter never panics; a refusal is a
// *RewriteError of a known kind; an accepted statement is guarded as
// FuzzRewrite checks, read in MySQL's grammar; and where both grammars
// read the same tokens and accept the statement, both rewrites are the
// same but for the version column's quotes.
func FuzzRewriteMySQL(f *testing.F) {
	for _, c := range myAcceptedCases {
		f.Add(c.in)
	}
	for _, c := range myRefusedCases {
		f.Add(c.in)
	}
	for _, c := range acceptedCases {
		f.Add(c.in)
	}
	for _, c := range refusedCases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, q string) {
		g, err := Rewrite(q, mySpec)
		if err != nil {
			var re *RewriteError
			if !errors.As(err, &re) || !errors.Is(err, ErrRewrite) || g != nil {
				t.Fatalf("untyped refusal %T: %v", err, err)
			}
			known := false
			for _, k := range reasonKinds {
				known = known || re.Kind == k
			}
			if !known || re.Offset < -1 || re.Offset > len(q) {
				t.Fatalf("refusal with kind %v at %d", re.Kind, re.Offset)
			}
			return
		}
		checkGuarded(t, q, g, mySpec)
		pg, perr := Rewrite(q, Spec{VersionColumn: "version", VersionParam: "version", BindType: sqlx.QUESTION})
		if perr != nil || !sameTokens(q) {
			return
		}
		norm := func(s string) string { return strings.ReplaceAll(s, "`version`", `"version"`) }
		if norm(g.Named) != norm(pg.Named) || g.VersionArg != pg.VersionArg || strings.Join(g.Params, ",") != strings.Join(pg.Params, ",") {
			t.Fatalf("the grammars disagree:\nMySQL      %s\nPostgreSQL %s", g.Named, pg.Named)
		}
	})
}

// sameTokens reports whether PostgreSQL's and MySQL's grammars split q
// into the same tokens.
func sameTokens(q string) bool {
	pt, perr := lex(q, nil)
	mt, merr := lexMySQL(q, nil)
	if perr != nil || merr != nil || len(pt) != len(mt) {
		return false
	}
	for i := range pt {
		if pt[i] != mt[i] {
			return false
		}
	}
	return true
}

// TestRewriteMySQLParsesInMariaDB: every guarded statement of
// myAcceptedCases prepares on a real MariaDB (the server parses it).
func TestRewriteMySQLParsesInMariaDB(t *testing.T) {
	my := mariatest.New(t)
	my.Exec("CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR(40), balance BIGINT, version INT NOT NULL DEFAULT 0)")
	my.Exec("CREATE TABLE `my``t` (id BIGINT PRIMARY KEY, balance BIGINT, version INT NOT NULL DEFAULT 0)")
	for _, c := range myAcceptedCases {
		g, err := Rewrite(c.in, mySpec)
		if err != nil {
			t.Fatal(err)
		}
		st, err := my.SQL().Prepare(g.SQL)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, g.SQL)
		}
		st.Close()
	}
}
