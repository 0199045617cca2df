package versioned

// Test-only views of the statements a Table builds and of the dialect's
// spelling, for the tests that pin the SQL text.

func (t *Table) UpdateSQL(columns ...string) (string, error) {
	set := make([]Pair, len(columns))
	for i, c := range columns {
		set[i].Column = c
	}
	return t.updateSQL("update", set, fence{})
}

func (t *Table) DeleteSQL() string { return t.deleteSQL }

// FencedUpdateSQL is UpdateSQL for a write fenced on column fence.
func (t *Table) FencedUpdateSQL(fenceColumn string, columns ...string) (string, error) {
	set := make([]Pair, len(columns))
	for i, c := range columns {
		set[i].Column = c
	}
	return t.updateSQL("update", set, fence{column: fenceColumn, token: 1, on: true})
}

func (t *Table) FencedDeleteSQL(fenceColumn string) string {
	return t.fencedDeleteSQL(fence{column: fenceColumn, token: 1, on: true})
}
func (t *Table) ProbeSQL() string { return t.probeSQL }

func (d Dialect) String() string { return d.name() }

func (d Dialect) Placeholder(n int) string {
	b := sqlBuf{d: d}
	b.paramAt(n)
	return b.b.String()
}

func (d Dialect) QuoteIdent(name string) (string, error) {
	if err := checkIdent("quote", "identifier", name); err != nil {
		return "", err
	}
	return (&Table{cfg: config{dialect: d}}).quote(name), nil
}
