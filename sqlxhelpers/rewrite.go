package sqlxhelpers

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
	"github.com/sqlock/sqlock/internal/vmodel"
)

// guardSpec says how to guard a statement: which column holds the version, which
// named parameter carries the expected version, and the driver's bind style.
type guardSpec struct {
	// VersionColumn is the version column's name as PostgreSQL stores it
	// (case-sensitive; it is always written quoted).
	VersionColumn string
	// VersionParam is the named parameter the guard compares the version
	// with (without the colon), normally the version field's sqlx name.
	VersionParam string
	// BindType is the sqlx bind type of the driver (sqlx.DOLLAR for pgx
	// and lib/pq); sqlx.UNKNOWN is written as '?' as sqlx does.
	BindType int
	// MySQL reads the statement in MySQL's grammar (lexMySQL), accepts
	// only single-table statements without WITH, compares column names
	// case-insensitively, and quotes the version column with backquotes.
	MySQL bool
}

// guarded is a statement with its version bump and version guard added.
type guarded struct {
	// Named is the guarded statement with :name parameters, for logs and
	// tests.
	Named string
	// SQL is the same statement with the driver's bind variables ($1 …,
	// ?, @p1 …), ready to run with the values of Params in order.
	SQL string
	// Params are the parameter names in the order of SQL's bind variables
	// (one per occurrence, as sqlx binds them).
	Params []string
	// VersionArg is the index in Params of the guard's own parameter.
	VersionArg int
	// Op is "update" or "delete".
	Op string
	// Table is the target table as written in the statement.
	Table string
}

// Rewrite adds the version bump and the version guard to a hand-written
// named UPDATE or DELETE:
//
//	UPDATE t SET a = :a WHERE <cond>
//	→ UPDATE t SET a = :a, "version" = "version" + 1 WHERE (<cond>) AND "version" = :version
//
//	DELETE FROM t WHERE <cond>
//	→ DELETE FROM t WHERE (<cond>) AND "version" = :version
//
// The user's condition is parenthesised, so an OR in it cannot bypass the
// guard. When the statement joins other tables (UPDATE … FROM, DELETE …
// USING) the version column is qualified with the target's alias or name.
// The statement's text is otherwise kept byte for byte (a trailing ';' is
// dropped), and parameters are replaced by bind variables in the driver's
// style.
//
// The statement is read by a tokenizer that follows PostgreSQL's lexical
// rules (see the package documentation); anything it cannot guard with
// certainty is a *RewriteError and nothing is returned to run. Rewrite is
// pure and safe for concurrent use; Helper caches its results.
func rewriteQuery(query string, spec guardSpec) (*guarded, error) {
	var buf [64]token
	g, err := rewrite(query, spec, buf[:0])
	if err != nil {
		err.Query = query
		return nil, err
	}
	return g, nil
}

// isWord reports whether token i is the keyword kw, compared
// ASCII-case-insensitively as PostgreSQL does for unquoted keywords. A word
// right after a '.' is never a keyword: there PostgreSQL reads any word,
// reserved or not, as a column or field label (o.from, o.distinct).
func (p *parser) isWord(i int, kw string) bool {
	if i < 0 || i >= len(p.toks) || p.toks[i].kind != tkWord || p.isLabel(i) {
		return false
	}
	t := p.toks[i]
	return asciiEqualFold(p.q[t.start:t.end], kw)
}

// isLabel reports whether token i follows a '.', where it is a label.
func (p *parser) isLabel(i int) bool { return i > 0 && p.toks[i-1].kind == tkDot }

func asciiEqualFold(s, kw string) bool {
	if len(s) != len(kw) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != kw[i] { // kw is lower case
			return false
		}
	}
	return true
}

type parser struct {
	q     string
	toks  []token
	mysql bool
}

func (p *parser) text(i int) string { return p.q[p.toks[i].start:p.toks[i].end] }

func (p *parser) errAt(kind string, i int, reason string) *RewriteError {
	off := len(p.q)
	if i < len(p.toks) {
		off = int(p.toks[i].start)
	}
	return &RewriteError{Kind: kind, Offset: off, Reason: reason}
}

// shape is what the parser learned about the statement.
type shape struct {
	op       string
	table    string // target as written
	qual     string // qualifier for the version column, "" when none is needed
	setEnd   int    // UPDATE: byte offset just after the SET list's last token
	whereBeg int    // byte offset of the WHERE condition's first token
	whereEnd int    // byte offset just after its last token
	cut      int    // where the statement text ends (a trailing ';' is cut)
}

func checkSpec(spec guardSpec) *RewriteError {
	if spec.VersionColumn == "" || strings.IndexByte(spec.VersionColumn, 0) >= 0 || !utf8.ValidString(spec.VersionColumn) {
		return &RewriteError{Kind: kindSpec, Offset: -1, Reason: "invalid version column " + strconv.Quote(spec.VersionColumn)}
	}
	if !validParamName(spec.VersionParam) {
		return &RewriteError{Kind: kindSpec, Offset: -1, Reason: "invalid version parameter name " + strconv.Quote(spec.VersionParam)}
	}
	switch spec.BindType {
	case sqlx.UNKNOWN, sqlx.QUESTION, sqlx.DOLLAR, sqlx.NAMED, sqlx.AT:
	default:
		return &RewriteError{Kind: kindSpec, Offset: -1, Reason: "unknown sqlx bind type " + strconv.Itoa(spec.BindType)}
	}
	return nil
}

// validParamName reports whether :name lexes as exactly that parameter.
func validParamName(s string) bool {
	if s == "" || s[len(s)-1] == '.' {
		return false
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return false
		case r == '_' || unicode.IsLetter(r):
		case i > 0 && (r == '.' || unicode.IsDigit(r)):
		default:
			return false
		}
	}
	return true
}

func rewrite(query string, spec guardSpec, buf []token) (*guarded, *RewriteError) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	toks, err := lexDialect(query, buf, spec.MySQL)
	if err != nil {
		return nil, err
	}
	p := parser{q: query, toks: toks, mysql: spec.MySQL}
	sh, err := p.parse(spec)
	if err != nil {
		return nil, err
	}
	for i := range p.toks {
		switch t := p.toks[i]; {
		case t.kind == tkPositional:
			return nil, p.errAt(kindPositional, i, "positional parameter "+p.text(i)+" in a statement with named parameters")
		case t.kind == tkOp && query[t.start] == '?' && (spec.BindType == sqlx.QUESTION || spec.BindType == sqlx.UNKNOWN):
			return nil, p.errAt(kindPositional, i, "'?' is this driver's bind variable; it cannot appear in a named statement")
		}
	}
	return p.build(sh, spec), nil
}

// parse finds the statement's parts: [WITH …] UPDATE target SET … [FROM …]
// WHERE … [RETURNING …] or [WITH …] DELETE FROM target [USING …] WHERE …
// [RETURNING …].
func (p *parser) parse(spec guardSpec) (shape, *RewriteError) {
	sh := shape{cut: len(p.q)}
	// A top-level ';' may only end the statement.
	for i, t := range p.toks {
		if t.kind == tkSemi && t.depth == 0 {
			if i+1 < len(p.toks) {
				return sh, p.errAt(kindMultipleStatements, i+1, "more SQL after a top-level ';'")
			}
			sh.cut = int(t.start)
			p.toks = p.toks[:i]
			break
		}
	}
	if len(p.toks) == 0 {
		return sh, p.errAt(kindNotWrite, 0, "empty statement")
	}
	i := 0
	if p.isWord(0, "with") && p.mysql {
		return sh, p.errAt(kindCTE, 0, "WITH before UPDATE or DELETE is not supported on MySQL")
	}
	if p.isWord(0, "with") {
		var err *RewriteError
		if i, err = p.cte(); err != nil {
			return sh, err
		}
	}
	switch {
	case p.isWord(i, "update"):
		return p.update(i+1, sh, spec)
	case p.isWord(i, "delete"):
		if !p.isWord(i+1, "from") {
			return sh, p.errAt(kindSyntax, i+1, "DELETE without FROM")
		}
		return p.delete(i+2, sh)
	}
	if i >= len(p.toks) {
		return sh, p.errAt(kindNotWrite, i, "a WITH clause without a statement")
	}
	what := "statement"
	if p.toks[i].kind == tkWord {
		what = strings.ToUpper(p.text(i))
	}
	return sh, p.errAt(kindNotWrite, i, what+" is not an UPDATE or DELETE")
}

// closing returns the index of the bracket closing the one at i.
func (p *parser) closing(i int) int {
	d := p.toks[i].depth
	for j := i + 1; j < len(p.toks); j++ {
		if (p.toks[j].kind == tkRParen || p.toks[j].kind == tkRBrack) && p.toks[j].depth == d {
			return j
		}
	}
	return len(p.toks) // unreachable: the lexer balanced the brackets
}

// isName reports whether token i can name a table, alias, CTE or column: a
// quoted identifier, or a word that is not one of PostgreSQL's reserved
// keywords.
func (p *parser) isName(i int) bool {
	if i < 0 || i >= len(p.toks) {
		return false
	}
	switch p.toks[i].kind {
	case tkQIdent:
		return true
	case tkWord:
		return p.isLabel(i) || !isReserved(p.text(i)) && !(p.mysql && isMySQLReserved(p.text(i)))
	}
	return false
}

// reserved are PostgreSQL's reserved keywords, including those that may only
// name functions or types: none can name a table, an alias or a column
// unquoted.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for w := range strings.FieldsSeq(` all analyse analyze and any array as asc asymmetric both case cast check
		collate column constraint create current_catalog current_date current_role current_time
		current_timestamp current_user default deferrable desc distinct do else end except false fetch
		for foreign from grant group having in initially intersect into lateral leading limit localtime
		localtimestamp not null offset on only or order placing primary references returning select
		session_user some symmetric system_user table then to trailing true union unique user using
		variadic when where window with authorization binary collation concurrently cross
		current_schema freeze full ilike inner is isnull join left like natural notnull outer overlaps
		right similar tablesample verbose`) {
		m[w] = true
	}
	return m
}()

// mysqlReserved are MySQL's and MariaDB's reserved words (and the
// statements' modifiers), none of which can name a table, an alias or a
// column unquoted.
var mysqlReserved = func() map[string]bool {
	m := map[string]bool{}
	for w := range strings.FieldsSeq(`accessible add all alter analyze and as asc asensitive before between
		bigint binary blob both by call cascade case change char character check collate column condition
		constraint continue convert create cross cube cume_dist current_date current_time current_timestamp
		current_user cursor database databases day_hour day_microsecond day_minute day_second dec decimal
		declare default delayed delete dense_rank desc describe deterministic distinct distinctrow div double
		drop dual each else elseif empty enclosed escaped except exists exit explain false fetch first_value
		float float4 float8 for force foreign from fulltext function generated get grant group grouping
		groups having high_priority hour_microsecond hour_minute hour_second if ignore in index infile inner
		inout insensitive insert int int1 int2 int3 int4 int8 integer intersect interval into is iterate join
		json_table key keys kill lag last_value lateral lead leading leave left like limit linear lines load
		localtime localtimestamp lock long longblob longtext loop low_priority match maxvalue mediumblob
		mediumint mediumtext middleint minute_microsecond minute_second mod modifies natural not
		no_write_to_binlog nth_value ntile null numeric of offset on optimize option optionally or order out
		outer outfile over partition percent_rank precision primary procedure purge quick range rank read
		reads read_write real recursive references regexp release rename repeat replace require resignal
		restrict return returning revoke right rlike row row_number rows schema schemas second_microsecond
		select sensitive separator set show signal smallint spatial specific sql sqlexception sqlstate
		sqlwarning sql_big_result sql_calc_found_rows sql_small_result ssl starting stored straight_join
		system table terminated then tinyblob tinyint tinytext to trailing trigger true undo union unique
		unlock unsigned update usage use using utc_date utc_time utc_timestamp values varbinary varchar
		varcharacter varying virtual when where while window with write xor year_month zerofill`) {
		m[w] = true
	}
	return m
}()

func isReserved(word string) bool { return inFolded(reserved, word) }

func isMySQLReserved(word string) bool { return inFolded(mysqlReserved, word) }

// inFolded reports whether word, folded to ASCII lower case, is in set.
func inFolded(set map[string]bool, word string) bool {
	const longest = 32 // longer than any reserved keyword
	if len(word) > longest {
		return false
	}
	var buf [longest]byte
	for i := 0; i < len(word); i++ {
		c := word[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return set[string(buf[:len(word)])]
}

// cte checks WITH [RECURSIVE] name [(cols)] AS [[NOT] MATERIALIZED] (query)
// [, …] and returns the index of the token after it. Only read-only CTEs
// are understood: a data-modifying one would change rows unguarded.
func (p *parser) cte() (int, *RewriteError) {
	i := 1
	if p.isWord(i, "recursive") {
		i++
	}
	for {
		if !p.isName(i) {
			return 0, p.errAt(kindCTE, i, "expected a CTE name")
		}
		i++
		if i < len(p.toks) && p.toks[i].kind == tkLParen {
			i = p.closing(i) + 1
		}
		if !p.isWord(i, "as") {
			return 0, p.errAt(kindCTE, i, "expected AS in the WITH clause")
		}
		i++
		if p.isWord(i, "not") {
			i++
			if !p.isWord(i, "materialized") {
				return 0, p.errAt(kindCTE, i, "expected MATERIALIZED after NOT")
			}
		}
		if p.isWord(i, "materialized") {
			i++
		}
		if i >= len(p.toks) || p.toks[i].kind != tkLParen {
			return 0, p.errAt(kindCTE, i, "expected '(' after AS")
		}
		end := p.closing(i)
		if err := p.readOnlyBody(i+1, end); err != nil {
			return 0, err
		}
		i = end + 1
		switch {
		case i < len(p.toks) && p.toks[i].kind == tkComma:
			i++
		case p.isWord(i, "search") || p.isWord(i, "cycle"):
			return 0, p.errAt(kindCTE, i, "SEARCH and CYCLE clauses are not supported")
		default:
			return i, nil
		}
	}
}

// readOnlyBody checks a CTE's query (tokens [from, to)) starts like a query
// and contains no data-modifying keyword at any depth (FOR [NO KEY] UPDATE
// locking clauses excepted).
func (p *parser) readOnlyBody(from, to int) *RewriteError {
	if from >= to {
		return p.errAt(kindCTE, from, "empty CTE")
	}
	for j := from; j < to; j++ {
		switch {
		case p.isWord(j, "insert"), p.isWord(j, "delete"), p.isWord(j, "merge"):
			return p.errAt(kindCTE, j, "data-modifying CTE")
		case p.isWord(j, "update"):
			if p.isWord(j-1, "for") || p.isWord(j-1, "key") && p.isWord(j-2, "no") && p.isWord(j-3, "for") {
				continue // a row-locking clause
			}
			return p.errAt(kindCTE, j, "data-modifying CTE")
		}
	}
	if !(p.isWord(from, "select") || p.isWord(from, "values") || p.isWord(from, "table") ||
		p.isWord(from, "with") || p.toks[from].kind == tkLParen) {
		return p.errAt(kindCTE, from, "a CTE that is not a SELECT, VALUES or TABLE query")
	}
	return nil
}

// target reads [ONLY] name[.name…] [*] [[AS] alias] from i, ONLY and *
// not both (PostgreSQL rejects ONLY t *); stop lists the keywords that may
// follow a target without an alias. It returns the next index.
func (p *parser) target(i int, sh *shape, stop ...string) (int, string, *RewriteError) {
	only := p.isWord(i, "only")
	if only {
		i++
	}
	if !p.isName(i) {
		return 0, "", p.errAt(kindSyntax, i, "expected the target table's name")
	}
	first := i
	i++
	for i+1 < len(p.toks) && p.toks[i].kind == tkDot && p.isName(i+1) {
		i += 2
	}
	sh.table = p.q[p.toks[first].start:p.toks[i-1].end]
	if i < len(p.toks) && p.toks[i].kind == tkOp && p.q[p.toks[i].start] == '*' {
		if only {
			return 0, "", p.errAt(kindSyntax, i, "ONLY and * cannot both qualify the target table")
		}
		i++
	}
	alias := ""
	switch {
	case p.isWord(i, "as"):
		if !p.isName(i + 1) {
			return 0, "", p.errAt(kindSyntax, i+1, "expected an alias after AS")
		}
		alias = p.text(i + 1)
		i += 2
	case i < len(p.toks) && p.toks[i].kind == tkQIdent:
		alias = p.text(i)
		i++
	case p.isName(i):
		for _, kw := range stop {
			if p.isWord(i, kw) {
				return i, alias, nil
			}
		}
		alias = p.text(i)
		i++
	}
	return i, alias, nil
}

// clauseEnd reports whether token j (at depth 0) starts one of the clauses
// that can follow a list: FROM (but not IS [NOT] DISTINCT FROM), WHERE,
// RETURNING.
func (p *parser) clauseWord(j int) string {
	if j < 0 || j >= len(p.toks) || p.toks[j].depth != 0 || p.toks[j].kind != tkWord || p.isLabel(j) {
		return ""
	}
	switch {
	case p.isWord(j, "where"):
		return "where"
	case p.isWord(j, "returning"):
		return "returning"
	case p.isWord(j, "from") && !p.isWord(j-1, "distinct"):
		return "from"
	}
	return ""
}

func (p *parser) update(i int, sh shape, spec guardSpec) (shape, *RewriteError) {
	sh.op = "update"
	i, alias, err := p.target(i, &sh, "set")
	if err != nil {
		return sh, err
	}
	if !p.isWord(i, "set") {
		return sh, p.errAt(kindSyntax, i, "expected SET after the target table")
	}
	i++
	// The SET list runs to the first top-level FROM, WHERE or RETURNING.
	j := i
	for j < len(p.toks) && p.clauseWord(j) == "" {
		j++
	}
	if j == i {
		return sh, p.errAt(kindSyntax, i, "empty SET list")
	}
	if err := p.assignments(i, j, spec.VersionColumn); err != nil {
		return sh, err
	}
	sh.setEnd = int(p.toks[j-1].end)
	joined := false
	if p.clauseWord(j) == "from" && p.mysql {
		return sh, p.errAt(kindUnsupported, j, "UPDATE … FROM is not MySQL's: a multiple-table UPDATE cannot be guarded")
	}
	if p.clauseWord(j) == "from" {
		joined = true
		for j++; j < len(p.toks) && p.clauseWord(j) != "where" && p.clauseWord(j) != "returning"; j++ {
		}
	}
	return p.where(j, sh, joined, alias)
}

func (p *parser) delete(i int, sh shape) (shape, *RewriteError) {
	sh.op = "delete"
	i, alias, err := p.target(i, &sh, "using", "where", "returning")
	if err != nil {
		return sh, err
	}
	joined := false
	if p.isWord(i, "using") && p.mysql {
		return sh, p.errAt(kindUnsupported, i, "a multiple-table DELETE cannot be guarded on MySQL")
	}
	if p.isWord(i, "using") {
		joined = true
		for i++; i < len(p.toks) && p.clauseWord(i) != "where" && p.clauseWord(i) != "returning"; i++ {
		}
	}
	return p.where(i, sh, joined, alias)
}

// where reads WHERE <condition> [RETURNING …] from i.
func (p *parser) where(i int, sh shape, joined bool, alias string) (shape, *RewriteError) {
	if i >= len(p.toks) || p.clauseWord(i) != "where" {
		if i < len(p.toks) && p.clauseWord(i) != "returning" {
			return sh, p.errAt(kindSyntax, i, "unexpected "+strconv.Quote(p.text(i))+" before WHERE")
		}
		return sh, p.errAt(kindNoWhere, i, "no top-level WHERE clause: the statement would touch every row")
	}
	i++
	if p.isWord(i, "current") && p.isWord(i+1, "of") {
		return sh, p.errAt(kindUnsupported, i, "WHERE CURRENT OF cannot be guarded")
	}
	first := i
	for ; i < len(p.toks); i++ {
		t := p.toks[i]
		if t.depth != 0 || t.kind != tkWord {
			continue
		}
		if p.clauseWord(i) == "returning" {
			break
		}
		if kw := p.forbiddenInWhere(i); kw != "" {
			return sh, p.errAt(kindUnsupported, i, "unexpected "+strings.ToUpper(kw)+" at the top level of WHERE")
		}
	}
	if i == first {
		return sh, p.errAt(kindSyntax, i, "empty WHERE condition")
	}
	for j := i + 1; j < len(p.toks); j++ {
		if p.toks[j].depth != 0 {
			continue
		}
		if kw := p.forbiddenInWhere(j); kw != "" || p.clauseWord(j) == "returning" {
			return sh, p.errAt(kindUnsupported, j, "unexpected "+strings.ToUpper(p.text(j))+" in RETURNING")
		}
	}
	sh.whereBeg = int(p.toks[first].start)
	sh.whereEnd = int(p.toks[i-1].end)
	if joined {
		sh.qual = sh.table
		if alias != "" {
			sh.qual = alias
		}
	}
	return sh, nil
}

// forbiddenInWhere returns the keyword at token i (at depth 0 of a WHERE
// condition) when it is a reserved word that can only start another clause
// there, or "".
func (p *parser) forbiddenInWhere(i int) string {
	for _, kw := range [...]string{"where", "order", "group", "having", "limit", "offset", "fetch",
		"for", "union", "intersect", "except", "window", "using", "into", "on"} {
		if p.isWord(i, kw) {
			return kw
		}
	}
	if p.clauseWord(i) == "from" {
		return "from"
	}
	return ""
}

// assignments checks the SET list in tokens [from, to): each item is
// col[.field|[sub]…] = expr or (col, …) = …, and none assigns the version
// column.
func (p *parser) assignments(from, to int, version string) *RewriteError {
	for i := from; i < to; {
		// this item ends at the next comma at depth 0
		end := i
		for end < to && !(p.toks[end].kind == tkComma && p.toks[end].depth == 0) {
			end++
		}
		if end == i {
			return p.errAt(kindSyntax, i, "empty item in the SET list")
		}
		j := i
		switch {
		case p.toks[i].kind == tkLParen:
			close := p.closing(i)
			for k := i + 1; k < close; {
				if !p.isName(k) {
					return p.errAt(kindSyntax, k, "expected a column name")
				}
				if p.namesColumn(k, version) {
					return p.errAt(kindVersionAssigned, k, "the version column is assigned by the statement; the guard increments it")
				}
				for k < close && !(p.toks[k].kind == tkComma && p.toks[k].depth == p.toks[i].depth+1) {
					k++
				}
				k++ // past the comma (or the closing paren)
			}
			j = close + 1
		case p.isName(i):
			if p.namesColumn(i, version) {
				return p.errAt(kindVersionAssigned, i, "the version column is assigned by the statement; the guard increments it")
			}
			j = i + 1
			for j < end {
				switch {
				case p.toks[j].kind == tkDot && p.isName(j+1):
					if p.mysql && p.namesColumn(j+1, version) { // t.version
						return p.errAt(kindVersionAssigned, j+1, "the version column is assigned by the statement; the guard increments it")
					}
					j += 2
					continue
				case p.toks[j].kind == tkLBrack:
					j = p.closing(j) + 1
					continue
				}
				break
			}
		default:
			return p.errAt(kindSyntax, i, "expected a column to assign")
		}
		if j >= end || p.toks[j].kind != tkOp || p.q[p.toks[j].start] != '=' || j+1 >= end {
			return p.errAt(kindSyntax, j, "expected '= value' in the SET list")
		}
		i = end + 1
		if end < to && i >= to {
			return p.errAt(kindSyntax, end, "trailing comma in the SET list")
		}
	}
	return nil
}

// namesColumn reports whether token i names column col: an unquoted word
// folded to lower case as PostgreSQL folds it, or a quoted identifier
// unescaped.
func (p *parser) namesColumn(i int, col string) bool {
	s := p.text(i)
	if p.mysql { // column names are case-insensitive in MySQL, quoted or not
		if s[0] == '`' {
			s = strings.ReplaceAll(s[1:len(s)-1], "``", "`")
		}
		return strings.EqualFold(s, col)
	}
	if p.toks[i].kind == tkWord {
		return asciiEqualFoldExact(s, col)
	}
	if s[0] != '"' { // U&"…": compare undecoded would be wrong; be safe
		return unicodeIdentMayBe(s, col)
	}
	return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`) == col
}

// asciiEqualFoldExact reports whether the unquoted word s, folded to lower
// case, equals col.
func asciiEqualFoldExact(s, col string) bool {
	if len(s) != len(col) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != col[i] {
			return false
		}
	}
	return true
}

// unicodeIdentMayBe treats every U&"…" identifier in a SET list as possibly
// the version column when it contains an escape: decoding UESCAPE forms is
// not worth the risk. Without a backslash it is compared literally.
func unicodeIdentMayBe(s, col string) bool {
	body := s[3 : len(s)-1]
	if strings.IndexByte(body, '\\') >= 0 {
		return true
	}
	return strings.ReplaceAll(body, `""`, `"`) == col
}

// build writes the guarded statement in both forms.
func (p *parser) build(sh shape, spec guardSpec) *guarded {
	var qv strings.Builder // quoted, optionally qualified version column
	if sh.qual != "" {
		qv.WriteString(sh.qual)
		qv.WriteByte('.')
	}
	quote := byte('"')
	if spec.MySQL {
		quote = '`'
	}
	qcol, _ := vmodel.QuoteIdent("rewrite", "version column", spec.VersionColumn, quote) // checked by checkSpec
	qv.WriteString(qcol)
	ref := qv.String()

	w := writer{bind: spec.BindType}
	w.named.Grow(len(p.q) + 2*len(ref) + len(qcol) + 40)
	w.sql.Grow(len(p.q) + 2*len(ref) + len(qcol) + 40)
	w.params = make([]string, 0, len(p.toks)/4+1)
	pos, ti := 0, 0
	// flush copies the text up to byte offset at, replacing parameters.
	flush := func(at int) {
		for ti < len(p.toks) && int(p.toks[ti].start) < at {
			t := p.toks[ti]
			ti++
			if t.kind == tkParam {
				w.text(p.q[pos:t.start])
				w.param(t.name)
				pos = int(t.end)
			}
		}
		w.text(p.q[pos:at])
		pos = at
	}
	if sh.op == "update" {
		flush(sh.setEnd)
		w.text(", ")
		w.text(qcol)
		w.text(" = ")
		w.text(ref)
		w.text(" + 1")
		p.separate(&w, sh.setEnd)
	}
	flush(sh.whereBeg)
	w.text("(")
	flush(sh.whereEnd)
	w.text(") AND ")
	w.text(ref)
	w.text(" = ")
	versionArg := len(w.params)
	w.param(spec.VersionParam)
	p.separate(&w, sh.whereEnd)
	flush(sh.cut)
	named := strings.TrimRightFunc(w.named.String(), isSpaceRune)
	sql := strings.TrimRightFunc(w.sql.String(), isSpaceRune)
	return &guarded{Named: named, SQL: sql, Params: w.params, VersionArg: versionArg, Op: sh.op, Table: sh.table}
}

// separate writes a space after an insertion when the user's text goes on
// right after it, so that the inserted "1" or ":version" cannot run into a
// following keyword ("1WHERE" would be one token).
func (p *parser) separate(w *writer, at int) {
	if at < len(p.q) && !isSpace(p.q[at]) {
		w.text(" ")
	}
}

func isSpaceRune(r rune) bool { return r < utf8.RuneSelf && isSpace(byte(r)) }

type writer struct {
	bind       int
	named, sql strings.Builder
	params     []string
}

func (w *writer) text(s string) {
	w.named.WriteString(s)
	w.sql.WriteString(s)
}

func (w *writer) param(name string) {
	w.params = append(w.params, name)
	w.named.WriteByte(':')
	w.named.WriteString(name)
	writeBindVar(&w.sql, w.bind, len(w.params), name)
}

// writeBindVar writes the n-th (1-based) bind variable in sqlx's style for
// bindType, as sqlx.Named and Rebind do.
func writeBindVar(b *strings.Builder, bindType, n int, name string) {
	switch bindType {
	case sqlx.DOLLAR:
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	case sqlx.NAMED:
		b.WriteByte(':')
		b.WriteString(name)
	case sqlx.AT:
		b.WriteString("@p")
		b.WriteString(strconv.Itoa(n))
	default:
		b.WriteByte('?')
	}
}
