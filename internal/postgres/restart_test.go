package postgres_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestReleaseRetriedAcrossARestart: a two-phase work fails while PostgreSQL
// restarts (-m immediate, a crash and recovery), so the release of its claim
// fails too. The release keeps trying in the background, so the retry that
// comes 2 s after the database is back gets a fresh claim, not a 409 for
// the rest of the 30 s lease.
func TestReleaseRetriedAcrossARestart(t *testing.T) {
	if os.Getenv("TEST_DATABASE_URL") != "" {
		t.Skip("restarts a cluster of its own; TEST_DATABASE_URL cannot be restarted")
	}
	t.Parallel()
	ctx := context.Background()
	pg, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	db, err := postgres.Open(ctx, pg.URL("postgres"), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := postgres.Migrate(db, 0); err != nil {
		t.Fatal(err)
	}
	r, err := idempotency.NewRunner(idempotency.Config{Store: postgres.New(db), TTL: ttl, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "restart.test", Key: "key-restart"},
		Fingerprint: "fp", Path: idempotency.TwoPhase}

	restarted := make(chan error, 1)
	_, err = r.Do(ctx, req, func(wctx context.Context, _ time.Time) (idempotency.Decided, error) {
		// The claim commits without waiting for its WAL (a crash may lose
		// it, which frees the key): write it out, as time would.
		if _, err := db.ExecContext(wctx, "CHECKPOINT"); err != nil {
			return idempotency.Decided{}, err
		}
		go func() { restarted <- pg.Restart(ctx, "immediate") }()
		if !waitDown(pg.URL("postgres"), 10*time.Second) {
			return idempotency.Decided{}, errors.New("the database never went down")
		}
		return idempotency.Decided{}, errors.New("the work failed while the database restarts")
	})
	if err == nil {
		t.Fatal("the work's failure was answered as a success")
	}
	t.Logf("the first attempt failed, as meant, while the database restarted (its release went on in the background)")
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)

	res, err := r.Do(ctx, req, func(_ context.Context, now time.Time) (idempotency.Decided, error) {
		return idempotency.Decided{Response: idempotency.Response{Status: 422, Body: []byte(`{}`)}}, nil
	})
	if err != nil || res.Outcome != idempotency.OutcomeClaimed {
		t.Fatalf("the retry 2 s after the restart: outcome %q, error %v; want a fresh claim", res.Outcome, err)
	}
}

// waitDown reports whether the database at url refuses a connection within
// timeout.
func waitDown(url string, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		db, err := sqlx.Open("postgres", url)
		if err != nil {
			return false
		}
		err = db.Ping()
		db.Close()
		if err != nil {
			return true
		}
	}
	return false
}
