package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestReleaseRetriedAcrossARestart: a two-phase work fails while PostgreSQL
// restarts (-m immediate, a crash and recovery), so the release of its claim
// fails too. The release keeps trying in the background, so the retry that
// comes 2 s after the database is back gets a fresh claim, not a 409 for
// the rest of the 30 s lease.
func TestReleaseRetriedAcrossARestart(t *testing.T) {
	testkit.Long(t, "restarts PostgreSQL")
	ctx := context.Background()
	pg, db, r := restartable(t)
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "restart.test", Key: "key-restart"},
		Fingerprint: "fp", Path: idempotency.TwoPhase}

	restarted := make(chan error, 1)
	_, err := r.Do(ctx, req, func(wctx context.Context, _ time.Time) (idempotency.Decided, error) {
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

// TestRecoveryPointRetriedAcrossARestart: a step-wise run's call to another
// system succeeds while PostgreSQL restarts (-m immediate), so the save of
// its recovery point fails and the request answers 503. The runner lets go
// of the key in the background, fenced by its token, until the database
// hears it: so the client's retries once the database is back are answered
// (the run continues from its last recovery point) within seconds, not
// refused with 409 for the rest of the last save's 30 s lease. The test
// measures how long the retries, sent every 200 ms from the moment the
// database answers, got 409.
func TestRecoveryPointRetriedAcrossARestart(t *testing.T) {
	testkit.Long(t, "restarts PostgreSQL")
	ctx := context.Background()
	pg, db, r := restartable(t)
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "restart.steps", Key: "key-restart-steps"},
		Fingerprint: "fp", Path: idempotency.StepWise}

	restarted := make(chan error, 1)
	var calls, asked int
	op := &idempotency.Steps{
		Operation: req.Scope.Operation, MaxAttempts: 8, Limit: 10 * time.Minute,
		Steps: []idempotency.Step{
			{Name: "recorded", Local: func(context.Context, *idempotency.Run, time.Time) (idempotency.Effect, error) { return nil, nil }},
			{Name: "called", External: &idempotency.External{
				Key: func(*idempotency.Run) string { return "call-1" },
				Call: func(wctx context.Context, _ string, _ *idempotency.Run) (string, error) {
					calls++
					// The recovery point "recorded" commits without waiting
					// for its WAL (a crash may lose it): write it out, as
					// time would.
					if _, err := db.ExecContext(wctx, "CHECKPOINT"); err != nil {
						return "", err
					}
					go func() { restarted <- pg.Restart(ctx, "immediate") }()
					if !waitDown(pg.URL("postgres"), 10*time.Second) {
						return "", errors.New("the database never went down")
					}
					return "REF-1", nil // the other system took it; its recovery point cannot be saved
				},
				Status: func(context.Context, string) (string, error) {
					asked++
					if calls > 0 {
						return "REF-1", nil
					}
					return "", idempotency.ErrNotSent
				},
			}},
		},
		Finish: func(_ context.Context, run *idempotency.Run, _ time.Time) (idempotency.Decided, error) {
			return idempotency.Decided{Response: idempotency.Response{Status: 201, Body: []byte(`{"ref":"` + run.Refs["called"] + `"}`)}}, nil
		},
	}
	input := json.RawMessage(`{}`)
	if _, err := r.DoSteps(ctx, req, op, input); apperr.Code(err) != apperr.Unavailable {
		t.Fatalf("the attempt whose recovery point could not be saved: %v, want unavailable", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	var (
		res idempotency.Result
		err error
	)
	var conflicts int
	for {
		res, err = r.DoSteps(ctx, req, op, input)
		if apperr.Code(err) != apperr.OperationInProgress || time.Since(back) > lease+5*time.Second {
			break
		}
		conflicts++
		time.Sleep(200 * time.Millisecond)
	}
	blocked := time.Since(back)
	t.Logf("after the database was back, the key answered 409 to %d retries, for %v", conflicts, blocked.Round(100*time.Millisecond))
	if err != nil || res.Response.Status != 201 || string(res.Response.Body) != `{"ref":"REF-1"}` {
		t.Fatalf("the retry: %+v, %v; want the 201 with the reference the other system gave", res, err)
	}
	if blocked > 3*time.Second {
		t.Errorf("the key answered 409 for %v after the database was back, want at most 3 s", blocked.Round(100*time.Millisecond))
	}
	if calls != 1 || asked == 0 {
		t.Errorf("the other system was called %d times and asked %d times, want 1 call, then asked", calls, asked)
	}
}

// restartable starts a cluster of the test's own (one it may restart), with
// the schema, and a Runner on it. It skips where TEST_DATABASE_URL names the
// server, which the test cannot restart.
func restartable(t *testing.T) (*pgtest.Server, *sqlx.DB, *idempotency.Runner) {
	t.Helper()
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
	return pg, db, r
}
