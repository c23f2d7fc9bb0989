package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

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
	testenv.Long(t, "restarts PostgreSQL")
	ctx := context.Background()
	pg, db := restartable(t)
	r, err := steps.NewRunner(idempotency.Config{TTL: ttl, Lease: lease}, runs.New(postgres.New(db)))
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "restart.steps", Key: "key-restart-steps"},
		Fingerprint: "fp", Path: steps.StepWise}

	restarted := make(chan error, 1)
	var calls, asked int
	op := &steps.Steps{
		Operation: req.Scope.Operation, MaxAttempts: 8, Limit: 10 * time.Minute,
		Steps: []steps.Step{
			{Name: "recorded", Local: func(context.Context, *steps.Run, time.Time) (idempotency.Effect, error) { return nil, nil }},
			{Name: "called", External: &steps.External{
				Key: func(*steps.Run) string { return "call-1" },
				Call: func(wctx context.Context, _ string, _ *steps.Run) (string, error) {
					calls++
					// The recovery point "recorded" commits without waiting
					// for its WAL (a crash may lose it): write it out, as
					// time would.
					if _, err := db.ExecContext(wctx, "CHECKPOINT"); err != nil {
						return "", err
					}
					go func() { restarted <- pg.Restart(ctx, "immediate") }()
					if !pgtest.WaitDown(pg.URL("postgres"), 10*time.Second) {
						return "", errors.New("the database never went down")
					}
					return "REF-1", nil // the other system took it; its recovery point cannot be saved
				},
				Status: func(context.Context, string) (string, error) {
					asked++
					if calls > 0 {
						return "REF-1", nil
					}
					return "", steps.ErrNotSent
				},
			}},
		},
		Finish: func(_ context.Context, run *steps.Run, _ time.Time) (idempotency.Answer, error) {
			return idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte(`{"ref":"` + run.Refs["called"] + `"}`)}}, nil
		},
	}
	input := json.RawMessage(`{}`)
	if _, err := r.Do(ctx, req, op, input, ""); apperr.Code(err) != apperr.Unavailable {
		t.Fatalf("the attempt whose recovery point could not be saved: %v, want unavailable", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	var res idempotency.Result
	var conflicts int
	for {
		res, err = r.Do(ctx, req, op, input, "")
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

// TestSaveRunCommitsAsynchronously: a run's recovery point commits without
// waiting for a WAL flush, whether it saved (its claim holds) or was fenced
// out, as save_run.sql says; a rewrite could drop the filter that does it.
func TestSaveRunCommitsAsynchronously(t *testing.T) {
	ctx := context.Background()
	_, db, _ := newStore(t)
	for _, fenced := range []bool{false, true} {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on"); err != nil { // the test server's is off
			t.Fatal(err)
		}
		key, token := "k-"+uuid.NewString(), uuid.NewString()
		if _, err := tx.ExecContext(ctx, readSQL(t, "../../../internal/postgres/sql/claim.sql"), nil, "alice", "demo-requests.expedite", key, token,
			"fp", time.Minute.Microseconds(), time.Hour.Microseconds()); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			t.Fatal(err)
		}
		if fenced {
			token = uuid.NewString()
		}
		var saved bool
		if err := tx.GetContext(ctx, &saved, readSQL(t, "sql/save_run.sql"), nil, time.Minute.Microseconds(), "alice",
			"demo-requests.expedite", key, token, `{}`, "ordered", "running", `{}`, nil, 1, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
		var sc string
		if err := tx.GetContext(ctx, &sc, "SHOW synchronous_commit"); err != nil {
			t.Fatal(err)
		}
		if saved == fenced || sc != "off" {
			t.Errorf("fenced %v: saved %v, synchronous_commit %q; want saved %v, off", fenced, saved, sc, !fenced)
		}
	}
}

// restartable starts a cluster of the test's own (one it may restart), with
// the template's schema and the demo's.
func restartable(t *testing.T) (*pgtest.Server, *sqlx.DB) {
	t.Helper()
	pg := pgtest.Own(t, pgtest.Options{})
	t.Parallel()
	db, err := postgres.Open(context.Background(), pg.URL("postgres"), postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Migrate(db); err != nil {
		t.Fatal(err)
	}
	return pg, db
}

// readSQL is the text of the file at path.
func readSQL(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
