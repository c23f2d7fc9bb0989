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
	purge := scanStatement(t, db, "purge_expired_keys", "idempotency_keys")
	for _, q := range []string{`SET enable_seqscan = off`, `PREPARE purge(timestamptz, timestamptz, text, text, text, integer) AS ` + purge} {
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
	purge := scanStatement(t, db, "purge_expired_keys", "idempotency_keys")
	if _, err := conn.ExecContext(ctx, `PREPARE purge(timestamptz, timestamptz, text, text, text, integer) AS `+purge); err != nil {
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

// TestSweepTakesEveryAbandonedClaim: keys of different TTLs. A batch's worth
// of kept claims (a trigger keeps them, as the full demo keeps the key of an
// unfinished run), claimed before some abandoned claims but expiring after
// them: each sweep still deletes every abandoned claim and every expired
// completed key, whichever was claimed first; the kept ones stay.
func TestSweepTakesEveryAbandonedClaim(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := context.Background()
	const batch, kept, abandoned, completed = 10, 10, 25, 15
	db.MustExec(`
CREATE FUNCTION keep_kept_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.idem_key LIKE 'kept-%' THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER keep_kept_keys BEFORE DELETE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION keep_kept_keys();`)
	for _, rows := range []struct {
		q string
		n int
	}{
		// Kept: claimed three days ago under a long TTL, expired an hour ago.
		{`INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, created_at, expires_at)
		SELECT 'alice', 'op', 'kept-' || i, 'fp', 'in_progress', gen_random_uuid(), now() - interval '3 days',
		       now() - interval '3 days', now() - interval '1 hour' + i * interval '1 second'
		FROM generate_series(1, $1) i`, kept},
		// Abandoned: claimed a day ago under a short TTL, expired before the kept ones.
		{`INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, created_at, expires_at)
		SELECT 'alice', 'op', 'abandoned-' || i, 'fp', 'in_progress', gen_random_uuid(), now() - interval '1 day',
		       now() - interval '1 day', now() - interval '2 hours' + i * interval '1 second'
		FROM generate_series(1, $1) i`, abandoned},
		// Completed, expired between the two.
		{`INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, status_code, response_body, created_at, completed_at, expires_at)
		SELECT 'alice', 'op', 'done-' || i, 'fp', 'completed', gen_random_uuid(), 201, '{}'::bytea,
		       now() - interval '2 days', now() - interval '2 days', now() - interval '90 minutes' + i * interval '1 second'
		FROM generate_series(1, $1) i`, completed},
	} {
		db.MustExec(rows.q, rows.n)
	}
	store := postgres.New(db)
	for sweep := 1; sweep <= 2; sweep++ {
		var deleted int64
		for mark := new(postgres.SweepMark); mark != nil; {
			n, next, err := store.PurgeExpired(ctx, batch, *mark)
			if err != nil {
				t.Fatal(err)
			}
			deleted, mark = deleted+n, next
		}
		var left []string
		if err := db.Select(&left, `SELECT idem_key FROM idempotency_keys WHERE idem_key NOT LIKE 'kept-%' ORDER BY idem_key`); err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Fatalf("sweep %d deleted %d; left %d abandoned claims and completed keys: %v", sweep, deleted, len(left), left[:min(len(left), 10)])
		}
	}
	var stayed int
	if err := db.Get(&stayed, `SELECT count(*) FROM idempotency_keys WHERE idem_key LIKE 'kept-%'`); err != nil || stayed != kept {
		t.Fatalf("%d kept keys stayed (%v), want %d", stayed, err, kept)
	}
}
