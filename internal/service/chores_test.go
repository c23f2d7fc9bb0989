package service

import (
	"context"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestSweepPassesOverKeptKeys: a trigger may keep a key the sweeper would
// delete (the full demo keeps the key of an unfinished run). A batch's
// worth of such keys, the first to expire, beside many expired ones: each
// sweep deletes every expired key it may, not the few a batch beside the
// kept ones leaves room for, nor none.
func TestSweepPassesOverKeptKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlx.Open("postgres", pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const batch, expired = 10, 95
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
	// The kept keys: abandoned claims, expired before the others.
	db.MustExec(`
INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, created_at, expires_at)
SELECT 'alice', 'op', 'kept-' || i, 'fp', 'in_progress', gen_random_uuid(), now() - interval '2 days', now() - interval '3 days', now() - interval '2 days'
FROM generate_series(1, $1) i`, batch)
	// The others, half completed keys and half abandoned claims.
	db.MustExec(`
INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, status_code, response_body, created_at, completed_at, expires_at)
SELECT 'alice', 'op', 'done-' || i, 'fp',
       CASE WHEN i % 2 = 0 THEN 'completed' ELSE 'in_progress' END::key_state, gen_random_uuid(),
       CASE WHEN i % 2 = 0 THEN NULL ELSE now() - interval '1 day' END,
       CASE WHEN i % 2 = 0 THEN 201 END, CASE WHEN i % 2 = 0 THEN '{}'::bytea END,
       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day' + i * interval '1 second'
FROM generate_series(1, $1) i`, expired)

	store := postgres.New(db)
	var deleted int64
	for sweep := 1; sweep <= 3 && deleted < expired; sweep++ {
		n, err := purgeAll(ctx, store, batch)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		t.Logf("sweep %d deleted %d", sweep, n)
	}
	var left []string
	if err := db.Select(&left, `SELECT idem_key FROM idempotency_keys ORDER BY idem_key`); err != nil {
		t.Fatal(err)
	}
	if deleted != expired || len(left) != batch {
		t.Fatalf("three sweeps of batches of %d deleted %d of %d expired keys; left %d keys (want the %d kept): %v",
			batch, deleted, expired, len(left), batch, fmt.Sprint(left[:min(len(left), 15)]))
	}
}
