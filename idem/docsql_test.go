package idem

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocsPrintTheStatementsSent: the SQL docs/idem.md prints for the
// table, the claim and the arm that makes the claim sent ahead of BEGIN
// answer a replay is the text the package sends (on the default table),
// so that the explanation cannot drift from the code.
func TestDocsPrintTheStatementsSent(t *testing.T) {
	doc, err := os.ReadFile("../docs/idem.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks = append(blocks, normalSQL(m[1]))
	}
	st := buildStatements(tableName{Name: DefaultTable})
	for name, sql := range map[string]string{"DDL": ddl(tableName{Name: DefaultTable}), "claim": st.claim, "claim ahead of BEGIN": st.claimAhead} {
		found := false
		for _, b := range blocks {
			// The doc prints the claim ahead of BEGIN as the column it
			// adds, the last one, before FROM c.
			from := strings.LastIndex(st.claim, "FROM c")
			found = found || b == normalSQL(sql) || normalSQL(strings.TrimSpace(st.claim[:from])+", "+b+" "+st.claim[from:]) == normalSQL(sql)
		}
		if !found {
			t.Errorf("docs/idem.md does not print the %s statement as sent:\n%s", name, sql)
		}
	}
}

// normalSQL folds a statement's white space (the doc indents a block in a
// list item).
func normalSQL(s string) string { return strings.Join(strings.Fields(s), " ") }
