package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestReleaseRetriedAcrossARestart: a two-phase work fails while PostgreSQL
// restarts (-m immediate, a crash and recovery), so the release of its claim
// fails too. The release keeps trying in the background, so the retry that
// comes 2 s after the database is back gets a fresh claim, not a 409 for
// the rest of the 30 s lease.
func TestReleaseRetriedAcrossARestart(t *testing.T) {
	testenv.Long(t, "restarts PostgreSQL")
	ctx := context.Background()
	pg, db, r := restartable(t)
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "restart.test", Key: "key-restart"},
		Fingerprint: "fp", Path: idempotency.TwoPhase}

	restarted := make(chan error, 1)
	_, err := r.Do(ctx, req, func(wctx context.Context, _ time.Time) (idempotency.Answer, error) {
		// The claim commits without waiting for its WAL (a crash may lose
		// it, which frees the key): write it out, as time would.
		if _, err := db.ExecContext(wctx, "CHECKPOINT"); err != nil {
			return idempotency.Answer{}, err
		}
		go func() { restarted <- pg.Restart(ctx, "immediate") }()
		if !pgtest.WaitDown(pg.URL("postgres"), 10*time.Second) {
			return idempotency.Answer{}, errors.New("the database never went down")
		}
		return idempotency.Answer{}, errors.New("the work failed while the database restarts")
	})
	if err == nil {
		t.Fatal("the work's failure was answered as a success")
	}
	t.Logf("the first attempt failed, as meant, while the database restarted (its release went on in the background)")
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)

	res, err := r.Do(ctx, req, func(_ context.Context, now time.Time) (idempotency.Answer, error) {
		return idempotency.Answer{Response: idempotency.Response{Status: 422, Body: []byte(`{}`)}}, nil
	})
	if err != nil || res.Outcome != idempotency.OutcomeClaimed {
		t.Fatalf("the retry 2 s after the restart: outcome %q, error %v; want a fresh claim", res.Outcome, err)
	}
}

// restartable starts a cluster of the test's own (one it may restart), with
// the schema, and a Runner on it. It skips where TEST_DATABASE_URL names the
// server, which the test cannot restart.
func restartable(t *testing.T) (*pgtest.Server, *sqlx.DB, *idempotency.Runner) {
	t.Helper()
	pg := pgtest.Own(t, pgtest.Options{})
	t.Parallel()
	db, err := postgres.Open(context.Background(), pg.URL("postgres"), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := postgres.Migrate(db, 0); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db)
	keys, err := idempotency.NewRunner(idempotency.Config{Store: store, TTL: ttl, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return pg, db, keys
}
