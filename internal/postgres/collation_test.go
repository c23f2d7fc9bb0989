package postgres_test

import (
	"testing"
)

// TestScopeColumnsCompareAsBytes: every column that holds a part of a
// key's scope (the actor, the operation, the key), in every table, compares
// as bytes (COLLATE "C"), whatever collation the database was created with.
// Keys are opaque: a language collation would send each comparison of the
// unique index through the C library's strcoll, and tie the index's order to
// that library's version.
func TestScopeColumnsCompareAsBytes(t *testing.T) {
	_, db, _ := newStore(t)
	var cols []struct {
		Table     string `db:"table_name"`
		Column    string `db:"column_name"`
		Collation string `db:"collation"`
	}
	if err := db.Select(&cols, `
SELECT c.relname AS table_name, a.attname AS column_name, coalesce(co.collname, '') AS collation
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attname IN ('actor_id', 'operation', 'idem_key') AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY 1, 2`); err != nil {
		t.Fatal(err)
	}
	// The tables the scope lives in must be among those found, so that a
	// renamed column cannot pass by being absent.
	want := map[string]bool{"idempotency_keys.actor_id": false, "idempotency_keys.operation": false,
		"idempotency_keys.idem_key": false, "demo_requests.actor_id": false}
	for _, c := range cols {
		name := c.Table + "." + c.Column
		if _, ok := want[name]; ok {
			want[name] = true
		}
		if c.Collation != "C" {
			t.Errorf("%s compares with collation %q, want \"C\"", name, c.Collation)
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("no column %s", name)
		}
	}
}
