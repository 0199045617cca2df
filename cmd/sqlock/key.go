package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/sqlock/sqlock/advisory"
	"github.com/sqlock/sqlock/inspect"
)

func keyCmd(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database (default $DATABASE_URL); without one, holders are not shown")
	rest, err := flags(fs, args)
	switch {
	case err != nil:
		return err
	case len(rest) != 1:
		return usageError{"key takes one NAME"}
	case rest[0] == "":
		return usageError{"key: the name is empty (advisory.KeyOf refuses it: ErrInvalidKey)"}
	}
	name := rest[0]
	k := advisory.KeyOf(name)
	n, _ := k.Int64()
	classid, objid, _ := k.Locktag()
	text := advisory.KeyText(name)
	t32, _ := text.Int64()
	lit := sqlLiteral(name)
	// A name too long for a line is shown wrapped, referred to as "name" in
	// the lines that explain the key, and split into adjacent string
	// constants in the SQL (which PostgreSQL joins), so that every line
	// fits 100 columns and the SQL still runs as shown.
	short := utf8.RuneCountInString(lit) <= shortLiteral
	ref := lit
	if !short {
		ref = "name"
	}
	w := e.stdout
	writeWrapped(w, "name     ", name)
	fmt.Fprintf(w, "key      %d   advisory.KeyOf, = hashtextextended(%s, 0)\n", n, ref)
	fmt.Fprintf(w, "halves   %d, %d   high and low int4\n", int32(n>>32), int32(n))
	fmt.Fprintf(w, "pg_locks classid %d, objid %d, objsubid 1\n", classid, objid)
	fmt.Fprintf(w, "32-bit   %d   advisory.KeyText, = hashtext(%s): another lock\n", t32, ref)
	fmt.Fprintf(w, "\nSQL that takes the same lock:\n")
	fmt.Fprintf(w, "  SELECT pg_advisory_lock(%d);  -- session: until pg_advisory_unlock\n", n)
	if short {
		fmt.Fprintf(w, "  SELECT pg_advisory_xact_lock(hashtextextended(%s, 0));  -- transaction\n", lit)
	} else {
		fmt.Fprintf(w, "  SELECT pg_advisory_xact_lock(hashtextextended(  -- transaction\n")
		chunks := splitRunes(name, keyWidth-len("    '', 0));"), true)
		for i, c := range chunks {
			end := ""
			if i == len(chunks)-1 {
				end = ", 0));"
			}
			fmt.Fprintf(w, "    %s%s\n", sqlLiteral(c), end)
		}
	}
	fmt.Fprintf(w, "(not pg_advisory_lock(%d, %d): two int4 are another key space)\n", int32(n>>32), int32(n))

	if *dsn == "" && e.getenv("DATABASE_URL") == "" {
		fmt.Fprintln(e.stderr, "sqlock: no --dsn or DATABASE_URL: holders not shown")
		return nil
	}
	db, err := open(ctx, *dsn, e)
	if err != nil {
		return err
	}
	defer db.Close()
	var server int64
	if err := db.QueryRowContext(ctx, "SELECT hashtextextended($1, 0)", name).Scan(&server); err != nil {
		return err
	}
	if server != n {
		return fmt.Errorf("the server hashes %s to %d, not %d: its hashtextextended differs (advisory.Locker.Verify refuses such a server)", lit, server, n)
	}
	snap, err := inspect.Take(ctx, db, inspect.WithNames(name))
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	var held, waiting int
	for _, l := range snap.Locks {
		if l.Key.Compare(k) != 0 && l.Key.Compare(text) != 0 {
			continue
		}
		verb := "held by"
		if l.Granted {
			held++
		} else {
			waiting++
			verb = "waited for by"
		}
		which := ""
		if l.Key.Compare(text) == 0 {
			which = " (32-bit key)"
		}
		mode := "exclusive"
		if l.Shared {
			mode = "shared"
		}
		fmt.Fprintf(w, "%s pid %d %s for %s, %s %s%s\n", verb, l.Session.PID, fit(who(l.Session), whoWidth),
			dur(l.For, l.AtMost), mode, l.Scope, which)
	}
	if held == 0 && waiting == 0 {
		fmt.Fprintln(w, "not held now")
	}
	return nil
}

// Widths of sqlock key's output, which fits keyWidth columns.
const (
	keyWidth = 100
	// shortLiteral is the longest quoted name that the explaining lines
	// and the SQL show inline: the longest of them, the key line with a
	// 20-character key, then fits keyWidth.
	shortLiteral = keyWidth - len("key      -9223372036854775808   advisory.KeyOf, = hashtextextended(, 0)")
	// whoWidth bounds the holder's application name and address: the rest
	// of the longest holder line, "waited for by pid 2147483647 " + who +
	// " for ≤99h59m, exclusive session (32-bit key)", takes 73 columns.
	whoWidth = keyWidth - 73
)

// sqlLiteral quotes s as an SQL string constant.
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// writeWrapped writes label and s, wrapped at keyWidth columns, the
// continuation lines indented under s.
func writeWrapped(w io.Writer, label, s string) {
	indent := strings.Repeat(" ", utf8.RuneCountInString(label))
	for i, c := range splitRunes(s, keyWidth-len(indent), false) {
		if i > 0 {
			label = indent
		}
		fmt.Fprintf(w, "%s%s\n", label, c)
	}
}

// splitRunes cuts s into pieces of at most n columns (runes), each cut
// after the piece's last ':', '/', '-', '_', '.' or space if one is in its
// second half, else where the piece is full; quoted counts a quote as two,
// as sqlLiteral doubles it.
func splitRunes(s string, n int, quoted bool) []string {
	var out []string
	start, cols := 0, 0
	brk, brkCols := -1, 0 // the byte offset after the last separator, and the columns before it
	for i, r := range s {
		c := 1
		if quoted && r == '\'' {
			c = 2
		}
		if cols+c > n {
			cut := i
			if brk > start && brkCols >= n/2 {
				cut, cols = brk, cols-brkCols
			} else {
				cols = 0
			}
			out = append(out, s[start:cut])
			start, brk = cut, -1
		}
		cols += c
		if strings.ContainsRune(":/-_. ", r) {
			brk, brkCols = i+utf8.RuneLen(r), cols
		}
	}
	return append(out, s[start:])
}
