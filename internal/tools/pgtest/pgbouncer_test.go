package pgtest

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
)

// TestPgBouncerRunsAsProductionDoes: the PgBouncer of the tests pools in
// transaction mode and refuses a startup parameter it does not track, as a
// PgBouncer configured for production does; a plain client gets through.
func TestPgBouncerRunsAsProductionDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs PgBouncer")
	}
	b := NewPgBouncer(t, "")
	dbURL := b.URL(NewURL(t))
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var one int
	if err := db.Get(&one, "SELECT 1"); err != nil || one != 1 {
		t.Fatalf("SELECT 1 through pgbouncer: %d, %v", one, err)
	}

	withParam, err := sqlx.Open("postgres", dbURL+"&statement_timeout=2000")
	if err != nil {
		t.Fatal(err)
	}
	defer withParam.Close()
	if err := withParam.Ping(); err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Fatalf("a statement_timeout startup parameter through pgbouncer: %v, want it refused", err)
	}

	admin, err := sqlx.Open("postgres", b.URL(server.URL("pgbouncer")))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rows, err := admin.Queryx("SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	settings := map[string]string{}
	for rows.Next() {
		m := map[string]any{}
		if err := rows.MapScan(m); err != nil {
			t.Fatal(err)
		}
		settings[string(asBytes(m["key"]))] = string(asBytes(m["value"]))
	}
	if settings["pool_mode"] != "transaction" || settings["ignore_startup_parameters"] != "" {
		t.Fatalf("pool_mode %q, ignore_startup_parameters %q; want transaction and none",
			settings["pool_mode"], settings["ignore_startup_parameters"])
	}
}

func asBytes(v any) []byte {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return []byte(v)
	}
	return nil
}

// TestNoPgBouncerSaysWhatToInstall: without a pgbouncer binary the test
// kit's error names the package to install (NewPgBouncer fails the test
// with it; it never skips).
func TestNoPgBouncerSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := pgbouncerPaths
	pgbouncerPaths = []string{filepath.Join(t.TempDir(), "pgbouncer")}
	defer func() { pgbouncerPaths = saved }()
	_, err := findPgBouncer()
	if err == nil || !strings.Contains(err.Error(), "apt-get install pgbouncer") {
		t.Fatalf("findPgBouncer without one: %v, want the install command", err)
	}
}
