package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

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
	lit := "'" + strings.ReplaceAll(name, "'", "''") + "'"
	w := e.stdout
	fmt.Fprintf(w, "name     %s\n", name)
	fmt.Fprintf(w, "key      %d   advisory.KeyOf, = hashtextextended(%s, 0)\n", n, lit)
	fmt.Fprintf(w, "halves   %d, %d   high and low int4\n", int32(n>>32), int32(n))
	fmt.Fprintf(w, "pg_locks classid %d, objid %d, objsubid 1\n", classid, objid)
	fmt.Fprintf(w, "32-bit   %d   advisory.KeyText, = hashtext(%s): another lock\n", t32, lit)
	fmt.Fprintf(w, "\nSQL that takes the same lock:\n")
	fmt.Fprintf(w, "  SELECT pg_advisory_lock(%d);  -- session: until pg_advisory_unlock\n", n)
	fmt.Fprintf(w, "  SELECT pg_advisory_xact_lock(hashtextextended(%s, 0));  -- transaction\n", lit)
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
		fmt.Fprintf(w, "%s pid %d %s for %s, %s %s%s\n", verb, l.Session.PID, who(l.Session),
			dur(l.For, l.AtMost), mode, l.Scope, which)
	}
	if held == 0 && waiting == 0 {
		fmt.Fprintln(w, "not held now")
	}
	return nil
}
