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
	for _, q := range []string{`SET enable_seqscan = off`, `PREPARE purge(timestamptz, timestamptz, text, text, text, integer) AS ` + string(purge)} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var plan []string
	if err := conn.SelectContext(ctx, &plan, `EXPLAIN EXECUTE purge(NULL, NULL, '', '', '', 500)`); err != nil {
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

// TestSweeperBoundsItsScanByTheClock: the sweeper reads completed keys
// through idempotency_keys_expires_at only as far as the clock, as the
// index scan's own condition. As a filter above the scan, the statement
// that finds fewer than a batch (the last of every sweep) reads the whole
// index and every row behind it: at 10 M keys it ran past its bound.
func TestSweeperBoundsItsScanByTheClock(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	purge, err := postgres.SQLFiles.ReadFile("sql/purge_expired_keys.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `PREPARE purge(timestamptz, timestamptz, text, text, text, integer) AS `+string(purge)); err != nil {
		t.Fatal(err)
	}
	for _, params := range []string{"NULL, NULL, '', '', '', 500", "now(), NULL, '', '', '', 500", "now(), now() - interval '1 day', 'a', 'op', 'k', 500"} {
		var plan []string
		if err := conn.SelectContext(ctx, &plan, `EXPLAIN EXECUTE purge(`+params+`)`); err != nil {
			t.Fatal(err)
		}
		bounded := false
		for i, line := range plan {
			if strings.Contains(line, "using idempotency_keys_expires_at") && i+1 < len(plan) &&
				strings.Contains(plan[i+1], "Index Cond:") && strings.Contains(plan[i+1], "expires_at <=") {
				bounded = true
			}
		}
		if !bounded {
			t.Errorf("purge(%s): the scan of idempotency_keys_expires_at has no Index Cond on expires_at:\n%s", params, strings.Join(plan, "\n"))
		}
	}
}
