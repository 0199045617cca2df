package sqlxhelpers

// errNamedMySQL refuses NamedExec on a MySQL or MariaDB handle. The
// rewriter reads PostgreSQL's grammar: in MySQL's, a '#' comment or an
// executable /*! … */ comment could hide or add a condition the rewriter
// reads the other way (so a guard could land in a comment and the write
// widen to every row), "…" is a string, a backslash escapes a quote, and
// identifiers are `backquoted`. Helper.Update and Helper.Delete build their
// statements themselves and work on MySQL.
func errNamedMySQL() *RewriteError {
	return &RewriteError{Kind: kindUnsupported, Offset: -1,
		Reason: "NamedExec reads PostgreSQL's grammar and cannot guard a MySQL statement with certainty: use Update or Delete (with Columns), or versioned.Update"}
}
