package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/internal/postgres"
)

// TestSweeperIndexHoldsCompletedKeysOnly: a claim in progress writes no
// entry into the sweeper's index (one index entry fewer per two-phase
// claim), and the sweeper still reads both kinds of
// expired rows through an index, never the whole key table: completed keys
// through idempotency_keys_expires_at, abandoned claims through
// idempotency_keys_in_progress.
func TestSweeperIndexHoldsCompletedKeysOnly(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	var def string
	if err := db.GetContext(ctx, &def, `SELECT indexdef FROM pg_indexes WHERE indexname = 'idempotency_keys_expires_at'`); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(def, "(expires_at) WHERE (lease_until IS NULL)") {
		t.Fatalf("the sweeper's index: %s; want it on expires_at of completed keys only", def)
	}

	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	purge, err := postgres.SQLFiles.ReadFile("sql/purge_expired_keys.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SET enable_seqscan = off`, `PREPARE purge(timestamptz, integer) AS ` + string(purge)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var plan []string
	if err := conn.SelectContext(ctx, &plan, `EXPLAIN EXECUTE purge(NULL, 500)`); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	for _, index := range []string{"idempotency_keys_expires_at", "idempotency_keys_in_progress"} {
		if !strings.Contains(text, index) {
			t.Errorf("the sweeper does not read %s:\n%s", index, text)
		}
	}
	if strings.Contains(text, "Seq Scan on idempotency_keys") {
		t.Errorf("the sweeper reads the whole key table:\n%s", text)
	}
}
