// Package runs keeps the runs of operations of several steps (package
// steps) in PostgreSQL, beside their keys in the template's store: every
// write is fenced by the key's claim token, and a step's business write
// commits with its recovery point.
package runs

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

func statement(name string) string { return postgres.Statement(sqlFiles, name) }

// Store keeps the runs beside the keys of the template's store.
type Store struct {
	*postgres.Store
}

// New returns the Store of the runs on keys' database.
func New(keys *postgres.Store) *Store { return &Store{Store: keys} }

var (
	loadRunSQL                   = statement("load_run.sql")
	saveRunSQL                   = statement("save_run.sql")
	finishRunSQL                 = statement("finish_run.sql")
	takeAbandonedRunsSQL         = statement("take_abandoned_runs.sql")
	resumeRunSQL                 = statement("resume_run.sql")
	countRunsNeedingAttentionSQL = statement("count_runs_needing_attention.sql")
	releaseRunSQL                = statement("release_run.sql")
)

// The claim of a step-wise key writes its run in the same statement, for a
// free scope and for one it takes over: a claim never exists without its
// run.
var (
	claimRunSQL         = statement("claim_run.sql")
	claimRunTakeoverSQL = statement("claim_run_takeover.sql")
)

// ClaimRun implements steps.RunStore (claimRunStatements).
func (s *Store) ClaimRun(ctx context.Context, sc idempotency.Scope, fp, token string, lease, ttl time.Duration, input json.RawMessage) (idempotency.ClaimResult, error) {
	// jsonb goes as text (see SaveRun).
	args := []any{s.Now(), sc.Actor, sc.Operation, sc.Key, fp, token, lease.Microseconds(), ttl.Microseconds(), string(input)}
	return s.WriteKey(ctx, nil, claimRunSQL, claimRunTakeoverSQL, fp, args)
}

// ReleaseRun implements steps.RunStore (sql/release_run.sql): while c
// holds its key, it deletes the key of a run still at its start, and ends
// the lease of any other running or compensating run now.
func (s *Store) ReleaseRun(ctx context.Context, c idempotency.Claim) error {
	var deleted, freed bool
	return s.QueryRow(ctx, nil, releaseRunSQL, []any{s.Now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token}, &deleted, &freed)
}

// Effect is the business write what of a step or of a run's answer: the
// statement query with args, run in the transaction of the run's write
// after it.
func Effect(what, query string, args ...any) idempotency.Effect {
	return &stepEffect{what: what, query: query, args: args}
}

// stepEffect is the business write of a step or of a run's answer: one
// statement, run in the transaction of the run's write after it, which must
// change a row (else idempotency.ErrEffectNotApplied: the row changed since
// the step read it, and nothing commits).
type stepEffect struct {
	what  string
	query string
	args  []any
}

func (e *stepEffect) Describe() string { return e.what }

// runRow is a row of runs as scanned.
type runRow struct {
	Input     []byte         `db:"input"`
	Point     string         `db:"point"`
	State     string         `db:"state"`
	Refs      []byte         `db:"refs"`
	Refusal   []byte         `db:"refusal"`
	Attempts  int            `db:"attempts"`
	LastError sql.NullString `db:"last_error"`
	StartedAt time.Time      `db:"started_at"`
}

// storedRefusal is a refusal's answer as runs.refusal keeps it.
type storedRefusal struct {
	Status   int               `json:"status"`
	Header   map[string]string `json:"header,omitempty"`
	Body     []byte            `json:"body"`
	ResultID string            `json:"resultId,omitempty"`
}

func (r runRow) run(s idempotency.Scope) (*steps.Run, error) {
	run := &steps.Run{Scope: s, Input: r.Input, Point: r.Point, State: steps.RunState(r.State),
		Attempts: r.Attempts, LastError: r.LastError.String, StartedAt: r.StartedAt}
	if err := json.Unmarshal(r.Refs, &run.Refs); err != nil {
		return nil, fmt.Errorf("decode run refs: %w", err)
	}
	if run.Refs == nil {
		run.Refs = map[string]string{}
	}
	if len(r.Refusal) > 0 {
		var sr storedRefusal
		if err := json.Unmarshal(r.Refusal, &sr); err != nil {
			return nil, fmt.Errorf("decode run refusal: %w", err)
		}
		run.Refusal = &idempotency.Response{Status: sr.Status, Header: sr.Header, Body: sr.Body, ResultID: sr.ResultID}
	}
	return run, nil
}

// LoadRun implements steps.RunStore.
func (s *Store) LoadRun(ctx context.Context, sc idempotency.Scope) (*steps.Run, error) {
	var row runRow
	err := s.QueryRow(ctx, nil, loadRunSQL, []any{sc.Actor, sc.Operation, sc.Key},
		&row.Input, &row.Point, &row.State, &row.Refs, &row.Refusal, &row.Attempts, &row.LastError, &row.StartedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return row.run(sc)
}

// SaveRun implements steps.RunStore (sql/save_run.sql, then the
// step's write, in one transaction).
func (s *Store) SaveRun(ctx context.Context, c idempotency.Claim, run *steps.Run, e idempotency.Effect, lease time.Duration) error {
	se, err := stepEffectOf(e)
	if err != nil {
		return err
	}
	refs, err := json.Marshal(run.Refs)
	if err != nil {
		return fmt.Errorf("encode run refs: %w", err)
	}
	// jsonb goes as text: with binary parameters, bytes would be taken
	// for jsonb's binary form.
	var refusal sql.NullString
	if r := run.Refusal; r != nil {
		b, err := json.Marshal(storedRefusal{Status: r.Status, Header: r.Header, Body: r.Body, ResultID: r.ResultID})
		if err != nil {
			return fmt.Errorf("encode run refusal: %w", err)
		}
		refusal = sql.NullString{String: string(b), Valid: true}
	}
	args := []any{s.Now(), lease.Microseconds(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token,
		string(run.Input), run.Point, string(run.State), string(refs), refusal, run.Attempts,
		sql.NullString{String: run.LastError, Valid: run.LastError != ""}, run.StartedAt}
	return s.runTx(ctx, se, func(tx *sqlx.Tx) error {
		var saved bool
		if err := s.QueryRow(ctx, tx, saveRunSQL, args, &saved); err != nil {
			return err
		}
		if !saved {
			return idempotency.ErrLeaseLost
		}
		return nil
	})
}

// FinishRun implements steps.RunStore (sql/finish_run.sql, then the
// answer's write, in one transaction).
func (s *Store) FinishRun(ctx context.Context, c idempotency.Claim, d idempotency.Decided) error {
	se, err := stepEffectOf(d.Effect)
	if err != nil {
		return err
	}
	status, body, headers, resultID, err := postgres.Answer(d)
	if err != nil {
		return err
	}
	args := []any{s.Now(), status, body, headers, resultID, c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token}
	return s.runTx(ctx, se, func(tx *sqlx.Tx) error {
		var claimed, done bool
		if err := s.QueryRow(ctx, tx, finishRunSQL, args, &claimed, &done); err != nil {
			return err
		}
		switch {
		case !claimed:
			return idempotency.ErrLeaseLost
		case !done:
			return errors.New("finish run: the key has no run")
		}
		return nil
	})
}

// runTx runs fn and then e's statement in one transaction; without e, fn's
// one statement commits on its own (fn gets a nil tx): a recovery point
// without a business write costs one round trip.
func (s *Store) runTx(ctx context.Context, e *stepEffect, fn func(tx *sqlx.Tx) error) error {
	if e == nil {
		return fn(nil)
	}
	tx, err := s.DB().BeginTxx(ctx, nil)
	if err != nil {
		return postgres.Err(err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, e.query, e.args...)
	if err != nil {
		return fmt.Errorf("%s: %w", e.what, postgres.Err(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return idempotency.ErrEffectNotApplied
	}
	return postgres.Err(tx.Commit())
}

func stepEffectOf(e idempotency.Effect) (*stepEffect, error) {
	if e == nil {
		return nil, nil
	}
	se, ok := e.(*stepEffect)
	if !ok {
		return nil, fmt.Errorf("postgres: %s is not a step's write of this store", e.Describe())
	}
	return se, nil
}

// TakeAbandonedRuns implements steps.RunStore
// (sql/take_abandoned_runs.sql).
func (s *Store) TakeAbandonedRuns(ctx context.Context, operations []string, n int, lease time.Duration) ([]steps.TakenRun, error) {
	var rows []struct {
		Now        time.Time `db:"now"`
		ClaimToken string    `db:"claim_token"`
		ActorID    string    `db:"actor_id"`
		Operation  string    `db:"operation"`
		IdemKey    string    `db:"idem_key"`
		runRow
	}
	if err := s.DB().SelectContext(ctx, &rows, takeAbandonedRunsSQL, s.Now(), pq.Array(operations), n, lease.Microseconds()); err != nil {
		return nil, postgres.Err(err)
	}
	taken := make([]steps.TakenRun, 0, len(rows))
	for _, r := range rows {
		sc := idempotency.Scope{Actor: r.ActorID, Operation: r.Operation, Key: r.IdemKey}
		run, err := r.run(sc)
		if err != nil {
			return nil, err
		}
		taken = append(taken, steps.TakenRun{Claim: idempotency.Claim{Scope: sc, Token: r.ClaimToken}, Run: run, Now: r.Now})
	}
	return taken, nil
}

// ResumeRun sets a run that needs attention running again, its turns and
// limit counted afresh, and frees its key for the completer
// (sql/resume_run.sql). It reports whether there was such a run.
func (s *Store) ResumeRun(ctx context.Context, sc idempotency.Scope) (bool, error) {
	var got struct {
		Resumed bool `db:"resumed"`
	}
	err := s.DB().GetContext(ctx, &got, resumeRunSQL, s.Now(), sc.Actor, sc.Operation, sc.Key)
	return got.Resumed, postgres.Err(err)
}

// RunsNeedingAttention counts the runs that need attention.
func (s *Store) RunsNeedingAttention(ctx context.Context) (int, error) {
	var n int
	err := s.DB().GetContext(ctx, &n, countRunsNeedingAttentionSQL)
	return n, postgres.Err(err)
}
