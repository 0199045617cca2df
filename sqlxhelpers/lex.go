package sqlxhelpers

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokKind is the kind of a significant token. Whitespace and comments are not
// tokens; they stay in the text between tokens.
type tokKind uint8

const (
	tkWord       tokKind = iota + 1 // unquoted identifier or keyword
	tkQIdent                        // "quoted" or U&"quoted" identifier; `quoted` on MySQL
	tkString                        // '…', E'…', U&'…', B'…', X'…', N'…', $tag$…$tag$
	tkNumber                        // 42, 1.5e3, 0x1F
	tkParam                         // :name (sqlx named parameter)
	tkPositional                    // $1
	tkCast                          // ::
	tkLParen                        // (
	tkRParen                        // )
	tkLBrack                        // [
	tkRBrack                        // ]
	tkComma                         // ,
	tkSemi                          // ;
	tkDot                           // .
	tkOp                            // any other single character: = + - * / < > ! ? @ # % ^ & | ~ ` :
)

// token is a significant token: q[start:end]. depth is the number of open
// parentheses and brackets around it; a bracket itself sits at the outer
// depth.
type token struct {
	kind       tokKind
	depth      int32
	start, end int32
	name       string // the parameter name, for tkParam
}

// lexer splits a PostgreSQL statement into tokens the way PostgreSQL's own
// scanner does for everything that decides where a token ends: quotes, quoted
// identifiers, comments (nested /* */ included), dollar quoting, numbers and
// identifiers (which may contain '$'). Operators are single characters; the
// rewriter never needs to know where a multi-character operator ends.
type lexer struct {
	q      string
	mysql  bool // MySQL's lexical grammar (see lexMySQL)
	toks   []token
	stack  []byte // open brackets: '(' or '['
	params int
}

func lexErr(kind string, off int, reason string) *RewriteError {
	return &RewriteError{Kind: kind, Offset: off, Reason: reason}
}

// lex tokenizes q. It refuses what it cannot tokenize with certainty: an
// unterminated quote, identifier, comment or dollar quote, unbalanced
// brackets, a backslash in a standard string, a NUL byte, a stray '$'.
func lex(q string, toks []token) ([]token, *RewriteError) {
	return lexDialect(q, toks, false)
}

// lexMySQL tokenizes q as MySQL and MariaDB do: `backquoted` identifiers,
// '#' and "-- " comments to the end of the line, /* */ comments that do not
// nest. Where MySQL's reading depends on the session's sql_mode or version
// it refuses instead of guessing: a "…" token (a string, or an identifier
// under ANSI_QUOTES), a backslash in a string (an escape, or itself under
// NO_BACKSLASH_ESCAPES), an executable /*! … */ or /*M! … */ comment, a
// /* inside a comment, "--" not followed by a space, and a '$' that starts
// a token.
func lexMySQL(q string, toks []token) ([]token, *RewriteError) {
	return lexDialect(q, toks, true)
}

func lexDialect(q string, toks []token, mysql bool) ([]token, *RewriteError) {
	l := lexer{q: q, toks: toks[:0], mysql: mysql}
	if err := l.run(); err != nil {
		return nil, err
	}
	return l.toks, nil
}

func (l *lexer) emit(kind tokKind, start, end int) {
	l.toks = append(l.toks, token{kind: kind, depth: int32(len(l.stack)), start: int32(start), end: int32(end)})
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isSpace(c byte) bool {
	// PostgreSQL's space: [ \t\n\r\f\v]
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func (l *lexer) run() *RewriteError {
	for i := 0; i < len(l.q); {
		next, err := l.mysqlToken(i)
		if next == 0 && err == nil {
			next, err = l.token(i)
		}
		if err != nil {
			return err
		}
		i = next
	}
	if len(l.stack) > 0 {
		return lexErr(kindUnbalanced, len(l.q), "unclosed '"+string(l.stack[len(l.stack)-1])+"'")
	}
	return nil
}

// token scans the token (or the space or comment) at i by PostgreSQL's
// rules and returns where it ends.
func (l *lexer) token(i int) (int, *RewriteError) {
	q := l.q
	c := q[i]
	switch {
	case c == 0:
		return 0, lexErr(kindSyntax, i, "NUL byte in statement")
	case isSpace(c):
		return i + 1, nil
	case c == '-' && i+1 < len(q) && q[i+1] == '-':
		i += 2
		for i < len(q) && q[i] != '\n' && q[i] != '\r' {
			i++
		}
		return i, nil
	case c == '/' && i+1 < len(q) && q[i+1] == '*':
		return l.blockComment(i)
	case c == '\'':
		end, err := l.stdString(i, i)
		if err != nil {
			return 0, err
		}
		l.emit(tkString, i, end)
		return end, nil
	case c == '"':
		end, err := l.quotedIdent(i, i)
		if err != nil {
			return 0, err
		}
		l.emit(tkQIdent, i, end)
		return end, nil
	case c == '$':
		end, kind, err := l.dollar(i)
		if err != nil {
			return 0, err
		}
		l.emit(kind, i, end)
		return end, nil
	case c == ':':
		return l.colon(i), nil
	case isDigit(c) || c == '.' && i+1 < len(q) && isDigit(q[i+1]):
		return l.number(i), nil
	case isIdentStart(c):
		return l.word(i)
	case c == '(' || c == '[':
		if c == '(' {
			l.emit(tkLParen, i, i+1)
		} else {
			l.emit(tkLBrack, i, i+1)
		}
		l.stack = append(l.stack, c)
		return i + 1, nil
	case c == ')' || c == ']':
		open := byte('(')
		kind := tkRParen
		if c == ']' {
			open, kind = '[', tkRBrack
		}
		if len(l.stack) == 0 || l.stack[len(l.stack)-1] != open {
			return 0, lexErr(kindUnbalanced, i, "unmatched '"+string(c)+"'")
		}
		l.stack = l.stack[:len(l.stack)-1]
		l.emit(kind, i, i+1)
		return i + 1, nil
	case c == ',':
		l.emit(tkComma, i, i+1)
	case c == ';':
		l.emit(tkSemi, i, i+1)
	case c == '.':
		l.emit(tkDot, i, i+1)
	default:
		if c >= 0x80 { // unreachable: bytes >= 0x80 start identifiers
			return 0, lexErr(kindSyntax, i, "unexpected byte")
		}
		l.emit(tkOp, i, i+1)
	}
	return i + 1, nil
}

// mysqlToken scans, on MySQL, what MySQL reads otherwise than PostgreSQL
// at i, and returns where it ends; 0 (and no error) leaves i to token.
func (l *lexer) mysqlToken(i int) (int, *RewriteError) {
	if !l.mysql {
		return 0, nil
	}
	q := l.q
	c := q[i]
	switch {
	case c == '#':
		return lineEnd(q, i), nil
	case c == '-' && i+1 < len(q) && q[i+1] == '-':
		if i+2 < len(q) && !isSpace(q[i+2]) && q[i+2] >= ' ' {
			return 0, lexErr(kindSyntax, i, "'--' not followed by a space: MySQL reads it as two minus signs, not a comment; write '- -' or '-- '")
		}
		return lineEnd(q, i), nil
	case c == '/' && i+1 < len(q) && q[i+1] == '*':
		return l.mysqlComment(i)
	case c == '\'':
		end, err := l.mysqlString(i)
		if err != nil {
			return 0, err
		}
		l.emit(tkString, i, end)
		return end, nil
	case c == '"':
		return 0, lexErr(kindAmbiguousString, i, `"…" is a string, or an identifier under sql_mode ANSI_QUOTES: write strings in '…' and identifiers in `+"`…`")
	case c == '`':
		end, err := l.doubledQuote(i, i, '`', "unterminated quoted identifier")
		if err != nil {
			return 0, err
		}
		l.emit(tkQIdent, i, end)
		return end, nil
	case c == '$':
		return 0, lexErr(kindSyntax, i, "'$' at the start of a token")
	case isIdentStart(c):
		// No prefixed strings (E'…', U&'…'): a letter before a quote is a
		// word of its own (x'…', b'…', N'…' and _charset'…' end where the
		// string does).
		j := i + 1
		for j < len(q) && isIdentCont(q[j]) {
			j++
		}
		l.emit(tkWord, i, j)
		return j, nil
	}
	return 0, nil
}

// lineEnd returns where a MySQL line comment starting at i ends: at the
// next newline.
func lineEnd(q string, i int) int {
	for i < len(q) && q[i] != '\n' {
		i++
	}
	return i
}

// mysqlComment skips a /* */ comment at i, which ends at the first */.
// It refuses an executable comment, whose text MySQL or MariaDB runs, and
// a /* inside the comment, which some versions read as nesting.
func (l *lexer) mysqlComment(i int) (int, *RewriteError) {
	q := l.q
	if strings.HasPrefix(q[i+2:], "!") || strings.HasPrefix(q[i+2:], "M!") {
		return 0, lexErr(kindUnsupported, i, "an executable comment (/*! … */) is SQL the server runs: the rewriter does not read inside comments")
	}
	for j := i + 2; j+1 < len(q); j++ {
		switch {
		case q[j] == '*' && q[j+1] == '/':
			return j + 2, nil
		case q[j] == '/' && q[j+1] == '*':
			return 0, lexErr(kindSyntax, j, "'/*' inside a comment")
		case q[j] == 0:
			return 0, lexErr(kindSyntax, j, "NUL byte in statement")
		}
	}
	return 0, lexErr(kindUnbalanced, i, "unterminated /* comment")
}

// mysqlString scans a '…' string at i, where a doubled quote is a quote. A
// backslash is refused: it escapes the next character unless sql_mode has
// NO_BACKSLASH_ESCAPES, so where the string ends would depend on the session.
func (l *lexer) mysqlString(i int) (int, *RewriteError) {
	return l.plainString(i, i, "backslash in a string: its meaning depends on sql_mode NO_BACKSLASH_ESCAPES; pass the value as a parameter")
}

// number scans a numeric literal at i: digits, letters (exponents, 0x…,
// and the junk PostgreSQL rejects), '_' and '.', and a sign right after a
// decimal exponent marker. Where a number ends never matters for guarding,
// only that it cannot swallow a quote, comment or bracket.
func (l *lexer) number(i int) int {
	q := l.q
	j := i + 1
	for j < len(q) {
		c := q[j]
		switch {
		case isIdentCont(c) && c != '$' || c == '.':
			j++
		case (c == '+' || c == '-') && (q[j-1] == 'e' || q[j-1] == 'E') && j+1 < len(q) && isDigit(q[j+1]) &&
			!(q[i] == '0' && j > i+1 && (q[i+1] == 'x' || q[i+1] == 'X')):
			j++
		default:
			l.emit(tkNumber, i, j)
			return j
		}
	}
	l.emit(tkNumber, i, j)
	return j
}

// blockComment skips a /* */ comment at i, which may nest.
func (l *lexer) blockComment(i int) (int, *RewriteError) {
	q := l.q
	start := i
	depth := 0
	for i < len(q) {
		switch {
		case q[i] == '/' && i+1 < len(q) && q[i+1] == '*':
			depth++
			i += 2
		case q[i] == '*' && i+1 < len(q) && q[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i, nil
			}
		default:
			i++
		}
	}
	return 0, lexErr(kindUnbalanced, start, "unterminated /* comment")
}

// stdString scans a standard string whose opening quote is at i (tokStart is
// where its prefix, if any, began). ” is an escaped quote. A backslash is
// refused: with standard_conforming_strings off it would escape the quote.
func (l *lexer) stdString(tokStart, i int) (int, *RewriteError) {
	return l.plainString(tokStart, i, "backslash in a standard string: its meaning depends on standard_conforming_strings; use an E'…' string")
}

// plainString scans a string whose opening quote is at i, where a doubled
// quote is a quote, and refuses a backslash with backslash as the reason.
func (l *lexer) plainString(tokStart, i int, backslash string) (int, *RewriteError) {
	q := l.q
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\'':
			if j+1 < len(q) && q[j+1] == '\'' {
				j++
				continue
			}
			return j + 1, nil
		case '\\':
			return 0, lexErr(kindAmbiguousString, j, backslash)
		case 0:
			return 0, lexErr(kindSyntax, j, "NUL byte in statement")
		}
	}
	return 0, lexErr(kindUnbalanced, tokStart, "unterminated string")
}

// escString scans an E'…' string: backslash escapes the next byte, ” is a
// quote.
func (l *lexer) escString(tokStart, i int) (int, *RewriteError) {
	q := l.q
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			j++ // skip the escaped byte, whatever it is
			if j < len(q) && q[j] == 0 {
				return 0, lexErr(kindSyntax, j, "NUL byte in statement")
			}
		case '\'':
			if j+1 < len(q) && q[j+1] == '\'' {
				j++
				continue
			}
			return j + 1, nil
		case 0:
			return 0, lexErr(kindSyntax, j, "NUL byte in statement")
		}
	}
	return 0, lexErr(kindUnbalanced, tokStart, "unterminated E'…' string")
}

// rawString scans a string whose only escape is a doubled quote (U&'…', where the
// server itself rejects backslashes when standard_conforming_strings is off,
// and B'…'/X'…', which hold only digits).
func (l *lexer) rawString(tokStart, i int) (int, *RewriteError) {
	return l.doubledQuote(tokStart, i, '\'', "unterminated string")
}

// quotedIdent scans "…" with "" as an escaped quote.
func (l *lexer) quotedIdent(tokStart, i int) (int, *RewriteError) {
	return l.doubledQuote(tokStart, i, '"', "unterminated quoted identifier")
}

// doubledQuote scans from the opening quote at i to just past the closing
// one, where a doubled quote stands for itself.
func (l *lexer) doubledQuote(tokStart, i int, quote byte, unterminated string) (int, *RewriteError) {
	q := l.q
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1, nil
		case 0:
			return 0, lexErr(kindSyntax, j, "NUL byte in statement")
		}
	}
	return 0, lexErr(kindUnbalanced, tokStart, unterminated)
}

// dollar scans what starts with '$' at a token boundary: $n (a positional
// parameter) or a dollar-quoted string $tag$…$tag$.
func (l *lexer) dollar(i int) (int, tokKind, *RewriteError) {
	q := l.q
	j := i + 1
	if j < len(q) && isDigit(q[j]) {
		for j < len(q) && isDigit(q[j]) {
			j++
		}
		return j, tkPositional, nil
	}
	// $tag$: tag is empty or [A-Za-z\200-\377_][A-Za-z\200-\377_0-9]*
	if j < len(q) && isIdentStart(q[j]) {
		j++
		for j < len(q) && isIdentCont(q[j]) && q[j] != '$' {
			j++
		}
	}
	if j >= len(q) || q[j] != '$' {
		return 0, 0, lexErr(kindSyntax, i, "stray '$' (neither a dollar quote nor a parameter)")
	}
	delim := q[i : j+1]
	body := j + 1
	for k := body; k+len(delim) <= len(q); k++ {
		if q[k] == 0 {
			return 0, 0, lexErr(kindSyntax, k, "NUL byte in statement")
		}
		if q[k] == '$' && q[k:k+len(delim)] == delim {
			return k + len(delim), tkString, nil
		}
	}
	return 0, 0, lexErr(kindUnbalanced, i, "unterminated dollar quote "+delim)
}

// colon scans what starts with ':' — '::' (a cast), ':name' (a named
// parameter: a letter or '_' then letters, digits, '_' and '.'), or a lone
// ':' (an array slice) — and returns where it ends.
func (l *lexer) colon(i int) int {
	q := l.q
	if i+1 < len(q) && q[i+1] == ':' {
		l.emit(tkCast, i, i+2)
		return i + 2
	}
	j := i + 1
	if r, n := utf8.DecodeRuneInString(q[j:]); n > 0 && (r == '_' || unicode.IsLetter(r)) {
		j += n
		for j < len(q) {
			r, n := utf8.DecodeRuneInString(q[j:])
			if r == '_' || r == '.' || unicode.IsLetter(r) || unicode.IsDigit(r) {
				j += n
				continue
			}
			break
		}
		for q[j-1] == '.' { // a trailing dot is punctuation, not part of the name
			j--
		}
		l.emit(tkParam, i, j)
		l.toks[len(l.toks)-1].name = q[i+1 : j]
		l.params++
		return j
	}
	l.emit(tkOp, i, i+1)
	return i + 1
}

// word scans an identifier or keyword at i, and the string and identifier
// forms that start with a letter: E'…', U&'…', U&"…", B'…', X'…', N'…'.
func (l *lexer) word(i int) (int, *RewriteError) {
	q := l.q
	j := i + 1
	for j < len(q) && isIdentCont(q[j]) {
		j++
	}
	if j-i == 1 && j < len(q) {
		c := q[i] | 0x20 // ASCII lower case
		switch {
		case q[j] == '\'' && c == 'e':
			end, err := l.escString(i, j)
			if err != nil {
				return 0, err
			}
			l.emit(tkString, i, end)
			return end, nil
		case q[j] == '\'' && (c == 'b' || c == 'x'):
			end, err := l.rawString(i, j)
			if err != nil {
				return 0, err
			}
			l.emit(tkString, i, end)
			return end, nil
		case q[j] == '\'' && c == 'n':
			end, err := l.stdString(i, j)
			if err != nil {
				return 0, err
			}
			l.emit(tkString, i, end)
			return end, nil
		case q[j] == '&' && c == 'u' && j+1 < len(q) && (q[j+1] == '\'' || q[j+1] == '"'):
			if q[j+1] == '\'' {
				end, err := l.rawString(i, j+1)
				if err != nil {
					return 0, err
				}
				l.emit(tkString, i, end)
				return end, nil
			}
			end, err := l.quotedIdent(i, j+1)
			if err != nil {
				return 0, err
			}
			l.emit(tkQIdent, i, end)
			return end, nil
		}
	}
	l.emit(tkWord, i, j)
	return j, nil
}
