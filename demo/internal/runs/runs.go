// Package runs keeps the runs of operations of several steps (package
// steps) in PostgreSQL, beside their keys in the template's store: every
// write is fenced by the key's claim token, and a step's business write
// commits with its recovery point.
package runs

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
)

// Store keeps the runs beside the keys of the template's store, on its
// database, and on its clock (postgres.Store.Clock). Its own statements
// run unprepared: there are few of them per run.
type Store struct {
	*postgres.Store
}

// New returns the Store of the runs on keys' database.
func New(keys *postgres.Store) *Store { return &Store{Store: keys} }

// now is the time argument of a statement: NULL for the database clock,
// which the statement reads as coalesce($1::timestamptz, now()).
func (s *Store) now() any {
	if s.Clock == nil {
		return nil
	}
	return s.Clock()
}

// queryRow runs query with args, in tx if not nil, and scans its one row
// into dest.
func (s *Store) queryRow(ctx context.Context, tx *sqlx.Tx, query string, args []any, dest ...any) error {
	var on sqlx.QueryerContext = s.DB()
	if tx != nil {
		on = tx
	}
	return Err(on.QueryRowxContext(ctx, query, args...).Scan(dest...))
}

// Err is err as the stores report it: a database worth asking again
// (postgres.Unavailable) is apperr unavailable (503); other errors pass
// unchanged.
func Err(err error) error {
	if err == nil || !postgres.Unavailable(err) {
		return err
	}
	return &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable, try again",
		RetryAfter: time.Second, Err: err}
}

var (
	//go:embed sql/load_run.sql
	loadRunSQL string
	//go:embed sql/save_run.sql
	saveRunSQL string
	//go:embed sql/finish_run.sql
	finishRunSQL string
	//go:embed sql/take_abandoned_runs.sql
	takeAbandonedRunsSQL string
	//go:embed sql/resume_run.sql
	resumeRunSQL string
	//go:embed sql/count_runs_needing_attention.sql
	countRunsNeedingAttentionSQL string
	//go:embed sql/release_run.sql
	releaseRunSQL string
)

// claimRunSQL is the claim of a step-wise key, which writes its run in the
// same statement: a claim never exists without its run.
//
//go:embed sql/claim_run.sql
var claimRunSQL string

// ClaimRun implements steps.RunStore (sql/claim_run.sql).
func (s *Store) ClaimRun(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration, input json.RawMessage) (idempotency.KeyWrite, error) {
	// jsonb goes as text (see SaveRun).
	args := []any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token, fp, lease.Microseconds(), ttl.Microseconds(), string(input)}
	var k claimRow
	if err := s.queryRow(ctx, nil, claimRunSQL, args, k.dest()...); err != nil {
		return idempotency.KeyWrite{}, err
	}
	return k.keyWrite()
}

// claimRow is the row a claim returns (write_key's key_write): the store's
// time, whether the claim wrote the key, the key as it was before (all NULL
// where there was none), and the rows its effect changed (none).
type claimRow struct {
	now                           time.Time
	wrote                         bool
	effect                        int
	fingerprint, state, resultID  sql.NullString
	leaseUntil                    sql.NullTime
	status                        sql.NullInt64
	body, headers                 []byte
	createdAt, completedAt, until sql.NullTime
}

func (k *claimRow) dest() []any {
	return []any{&k.now, &k.wrote, &k.fingerprint, &k.state, &k.leaseUntil, &k.status, &k.body,
		&k.headers, &k.resultID, &k.createdAt, &k.completedAt, &k.until, &k.effect}
}

// keyWrite is the claim as the Runner decides on it.
func (k *claimRow) keyWrite() (idempotency.KeyWrite, error) {
	w := idempotency.KeyWrite{Now: k.now, Wrote: k.wrote}
	if !k.state.Valid {
		return w, nil
	}
	w.Prev = &idempotency.Record{Fingerprint: k.fingerprint.String, State: idempotency.State(k.state.String),
		LeaseUntil: k.leaseUntil.Time, CreatedAt: k.createdAt.Time, CompletedAt: k.completedAt.Time, ExpiresAt: k.until.Time,
		Response: idempotency.Response{Status: int(k.status.Int64), Body: k.body, ResultID: k.resultID.String}}
	if len(k.headers) > 0 {
		if err := json.Unmarshal(k.headers, &w.Prev.Response.Header); err != nil {
			return idempotency.KeyWrite{}, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return w, nil
}

// ReleaseRun implements steps.RunStore (sql/release_run.sql): while c
// holds its key, it deletes the key of a run still at its start, and ends
// the lease of any other running or compensating run now.
func (s *Store) ReleaseRun(ctx context.Context, c idempotency.Claim) error {
	var deleted, freed bool
	return s.queryRow(ctx, nil, releaseRunSQL, []any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token}, &deleted, &freed)
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

// loadedRow is what load_run.sql returns: the store's time, and the row,
// its columns NULL when there is none.
type loadedRow struct {
	Now       time.Time
	Input     []byte
	Point     sql.NullString
	State     sql.NullString
	Refs      []byte
	Refusal   []byte
	Attempts  sql.NullInt64
	LastError sql.NullString
	StartedAt sql.NullTime
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

// LoadRun implements steps.RunStore (sql/load_run.sql).
func (s *Store) LoadRun(ctx context.Context, sc idempotency.Scope) (*steps.Run, time.Time, error) {
	var l loadedRow
	err := s.queryRow(ctx, nil, loadRunSQL, []any{s.now(), sc.Actor, sc.Operation, sc.Key},
		&l.Now, &l.Input, &l.Point, &l.State, &l.Refs, &l.Refusal, &l.Attempts, &l.LastError, &l.StartedAt)
	if err != nil || !l.State.Valid {
		return nil, l.Now, err
	}
	run, err := runRow{Input: l.Input, Point: l.Point.String, State: l.State.String, Refs: l.Refs, Refusal: l.Refusal,
		Attempts: int(l.Attempts.Int64), LastError: l.LastError, StartedAt: l.StartedAt.Time}.run(sc)
	return run, l.Now, err
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
	args := []any{s.now(), lease.Microseconds(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token,
		string(run.Input), run.Point, string(run.State), string(refs), refusal, run.Attempts,
		sql.NullString{String: run.LastError, Valid: run.LastError != ""}, run.StartedAt}
	return s.runTx(ctx, se, func(tx *sqlx.Tx) error {
		var saved bool
		if err := s.queryRow(ctx, tx, saveRunSQL, args, &saved); err != nil {
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
func (s *Store) FinishRun(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	se, err := stepEffectOf(a.Effect)
	if err != nil {
		return err
	}
	// The answer as a key row stores it, as the template's store writes it.
	headers, err := json.Marshal(a.Response.Header)
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	resultID := sql.NullString{String: a.Response.ResultID, Valid: a.Response.ResultID != ""}
	args := []any{s.now(), a.Response.Status, a.Response.Body, string(headers), resultID, c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token}
	return s.runTx(ctx, se, func(tx *sqlx.Tx) error {
		var wrote, done bool
		if err := s.queryRow(ctx, tx, finishRunSQL, args, &wrote, &done); err != nil {
			return err
		}
		switch {
		case !wrote:
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
		return Err(err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, e.query, e.args...)
	if err != nil {
		return fmt.Errorf("%s: %w", e.what, Err(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return idempotency.ErrEffectNotApplied
	}
	return Err(tx.Commit())
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
	if err := s.DB().SelectContext(ctx, &rows, takeAbandonedRunsSQL, s.now(), pq.Array(operations), n, lease.Microseconds()); err != nil {
		return nil, Err(err)
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
	err := s.DB().GetContext(ctx, &got, resumeRunSQL, s.now(), sc.Actor, sc.Operation, sc.Key)
	return got.Resumed, Err(err)
}

// RunsNeedingAttention counts the runs that need attention.
func (s *Store) RunsNeedingAttention(ctx context.Context) (int, error) {
	var n int
	err := s.DB().GetContext(ctx, &n, countRunsNeedingAttentionSQL)
	return n, Err(err)
}
