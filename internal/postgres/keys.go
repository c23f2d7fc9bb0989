package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// One concept has one name in Go, SQL and JSON: the scope is (actor_id,
// operation, idem_key), the significant fields' hash is fingerprint, and a
// claim's lease ends at lease_until. Every statement is a file of sql/ that
// lists its parameters at its top, in the order the Go code passes them;
// its time is $1, coalesce($1::timestamptz, now()): the database clock
// unless a test sets Store.Clock.
//
// A statement that writes a key row has two forms: one for a free scope,
// run first, and one able to take a row over, run only when the first found
// one to take over (sql/claim.sql says why).

// writeStatements are the two forms of a statement that writes a key row.
type writeStatements struct{ free, takeOver string }

var claimStatements = writeStatements{free: statement("claim.sql"), takeOver: statement("claim_takeover.sql")}

// keyStatements are the statements of one kind of effect, one per path:
// the one-phase create in its two forms, and the two-phase finish, fenced
// by the claim token. Each writes the business change FROM the key row it
// writes (the CTE finished), so the change commits exactly with its key.
type keyStatements struct {
	onePhase writeStatements
	finish   string
}

// answerOnly completes a key with no business change (a refusal).
var answerOnly = keyStatements{
	onePhase: writeStatements{free: statement("answer_only.sql"), takeOver: statement("answer_only_takeover.sql")},
	finish:   statement("finish_claim_answer_only.sql"),
}

// effect is the postgres store's idempotency.Effect: its statements, their
// business arguments (after the key's, in the files' order), and whether
// they may find their row changed since the work read it (then they run in
// a transaction that rolls back).
type effect struct {
	what        string
	stmts       *keyStatements
	args        []any
	conditional bool
}

func (e *effect) Describe() string { return e.what }

// effectOf returns d's effect, nil for none (an answer only).
func effectOf(d idempotency.Decided) (*effect, error) {
	if d.Effect == nil {
		return nil, nil
	}
	e, ok := d.Effect.(*effect)
	if !ok {
		return nil, fmt.Errorf("postgres: %s is not an effect of this store", d.Effect.Describe())
	}
	return e, nil
}

// statementsOf returns the statements of e and its business arguments.
func statementsOf(e *effect) (*keyStatements, []any) {
	if e == nil {
		return &answerOnly, nil
	}
	return e.stmts, e.args
}

// answer is the stored answer of a Decided, as the statements take it.
type answer struct {
	status   int
	body     []byte
	headers  string
	resultID sql.NullString
}

func answerOf(d idempotency.Decided) (answer, error) {
	headers, err := json.Marshal(d.Response.Header)
	if err != nil {
		return answer{}, fmt.Errorf("encode headers: %w", err)
	}
	return answer{status: d.Response.Status, body: d.Response.Body, headers: string(headers),
		resultID: sql.NullString{String: d.Response.ResultID, Valid: d.Response.ResultID != ""}}, nil
}

// recordRow is a row of idempotency_keys as scanned: recordColumns, in
// their order, as lookup_key.sql and the key statements (prev.*) return
// them.
type recordRow struct {
	Fingerprint     sql.NullString
	State           sql.NullString
	LeaseUntil      sql.NullTime
	StatusCode      sql.NullInt64
	ResponseBody    []byte
	ResponseHeaders []byte
	ResultID        sql.NullString
	CreatedAt       sql.NullTime
	CompletedAt     sql.NullTime
	ExpiresAt       sql.NullTime
}

// recordColumns are the columns of a recordRow, in the order of dest.
var recordColumns = []string{"fingerprint", "state", "lease_until", "status_code", "response_body",
	"response_headers", "result_id", "created_at", "completed_at", "expires_at"}

// dest appends the scan destinations of r to d, in the order of
// recordColumns (TestStatementsReturnTheColumnsTheStoreScans holds the
// files to it).
func (r *recordRow) dest(d ...any) []any {
	return append(d, &r.Fingerprint, &r.State, &r.LeaseUntil, &r.StatusCode, &r.ResponseBody,
		&r.ResponseHeaders, &r.ResultID, &r.CreatedAt, &r.CompletedAt, &r.ExpiresAt)
}

// record converts the row, nil when the LEFT JOIN found none.
func (r recordRow) record() (*idempotency.Record, error) {
	if !r.State.Valid {
		return nil, nil
	}
	rec := &idempotency.Record{
		Fingerprint: r.Fingerprint.String,
		State:       idempotency.State(r.State.String),
		LeaseUntil:  r.LeaseUntil.Time,
		CreatedAt:   r.CreatedAt.Time,
		CompletedAt: r.CompletedAt.Time,
		ExpiresAt:   r.ExpiresAt.Time,
		Response: idempotency.Response{
			Status:   int(r.StatusCode.Int64),
			Body:     r.ResponseBody,
			ResultID: r.ResultID.String,
		},
	}
	if len(r.ResponseHeaders) > 0 {
		if err := json.Unmarshal(r.ResponseHeaders, &rec.Response.Header); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return rec, nil
}

// claimRow is what a statement that writes a key row returns: claimColumns,
// in their order.
type claimRow struct {
	Now     time.Time
	Claimed bool
	Effect  int
	recordRow
}

// claimColumns are the columns of a claimRow, in the order of dest.
var claimColumns = append([]string{"now", "claimed", "effect"}, recordColumns...)

// The columns of the finish statements (claimed, and how many rows the
// effect changed) and of lookup_key.sql (the store's time and the row).
var (
	finishColumns = []string{"claimed", "effect"}
	lookupColumns = append([]string{"now"}, recordColumns...)
)

func (r *claimRow) dest() []any { return r.recordRow.dest(&r.Now, &r.Claimed, &r.Effect) }

// write runs w's statement for a free scope and, only when the row it found
// is one to take over (idempotency.Decide, which agrees with the takeover
// files), the statement that takes it over. It returns what the last one
// found and how many rows its effect changed.
func (s *Store) write(ctx context.Context, tx *sqlx.Tx, w writeStatements, fp string, args []any) (idempotency.ClaimResult, int, error) {
	var row claimRow
	if err := s.queryRow(ctx, tx, w.free, args, row.dest()...); err != nil {
		return idempotency.ClaimResult{}, 0, err
	}
	cr, err := row.result()
	if err != nil || cr.Claimed || cr.Prev == nil {
		return cr, row.Effect, err
	}
	if k := idempotency.Decide(cr.Prev, fp, cr.Now).Kind; k != idempotency.TakeOverExpired && k != idempotency.TakeOverLease {
		return cr, row.Effect, nil
	}
	row = claimRow{}
	if err := s.queryRow(ctx, tx, w.takeOver, args, row.dest()...); err != nil {
		return idempotency.ClaimResult{}, 0, err
	}
	cr, err = row.result()
	return cr, row.Effect, err
}

func (r claimRow) result() (idempotency.ClaimResult, error) {
	prev, err := r.record()
	return idempotency.ClaimResult{Claimed: r.Claimed, Prev: prev, Now: r.Now}, err
}

// Claim implements idempotency.Store (sql/claim.sql).
func (s *Store) Claim(ctx context.Context, sc idempotency.Scope, fp, token string, lease, ttl time.Duration) (idempotency.ClaimResult, error) {
	args := []any{s.now(), sc.Actor, sc.Operation, sc.Key, fp, token, lease.Microseconds(), ttl.Microseconds()}
	cr, _, err := s.write(ctx, nil, claimStatements, fp, args)
	return cr, err
}

// CreateResultAndFinishAtomically implements idempotency.Store: one
// statement writes the key completed with d's answer and, FROM it, d's
// change (for a create, sql/create_demo_request.sql).
func (s *Store) CreateResultAndFinishAtomically(ctx context.Context, sc idempotency.Scope, fp, token string, ttl time.Duration, d idempotency.Decided) (idempotency.ClaimResult, error) {
	e, err := effectOf(d)
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	a, err := answerOf(d)
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	stmts, effectArgs := statementsOf(e)
	args := make([]any, 0, 11+len(effectArgs))
	args = append(append(args, s.now(), sc.Actor, sc.Operation, sc.Key, fp, token,
		a.status, a.body, a.headers, a.resultID, ttl.Microseconds()), effectArgs...)
	var cr idempotency.ClaimResult
	err = s.inTx(ctx, e, func(tx *sqlx.Tx) error {
		var changed int
		if cr, changed, err = s.write(ctx, tx, stmts.onePhase, fp, args); err != nil {
			return err
		}
		return checkEffect(e, cr.Claimed, changed)
	})
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	return cr, nil
}

// FinishClaimAtomically implements idempotency.Store: one statement, fenced
// by the claim token, completes the key and makes d's change (for a create,
// sql/finish_claim_create_demo_request.sql).
func (s *Store) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, d idempotency.Decided) error {
	e, err := effectOf(d)
	if err != nil {
		return err
	}
	a, err := answerOf(d)
	if err != nil {
		return err
	}
	stmts, effectArgs := statementsOf(e)
	args := make([]any, 0, 9+len(effectArgs))
	args = append(append(args, s.now(), a.status, a.body, a.headers, a.resultID,
		c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token), effectArgs...)
	return s.inTx(ctx, e, func(tx *sqlx.Tx) error {
		var claimed bool // finishColumns
		var changed int
		if err := s.queryRow(ctx, tx, stmts.finish, args, &claimed, &changed); err != nil {
			return err
		}
		if !claimed {
			return idempotency.ErrLeaseLost
		}
		return checkEffect(e, claimed, changed)
	})
}

// checkEffect reports an effect that changed nothing though its key was
// written: for a conditional effect, its row changed since the work read it
// (ErrEffectNotApplied: the transaction rolls back); else a bug in its SQL.
func checkEffect(e *effect, wrote bool, n int) error {
	switch {
	case e == nil || !wrote || n > 0:
		return nil
	case e.conditional:
		return idempotency.ErrEffectNotApplied
	}
	return fmt.Errorf("finish: the business write %q changed nothing", e.what)
}

var (
	releaseClaimSQL          = statement("release_claim.sql")
	lookupKeySQL             = statement("lookup_key.sql")
	countInProgressClaimsSQL = statement("count_in_progress_claims.sql")
)

// Release implements idempotency.Store: it deletes the claim while it is
// still c's and still in progress, so the next request with the key runs as a
// first one. A finish whose commit went through unseen (the connection broke
// after it) left the key completed, and the release leaves it alone.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	_, err := s.db.ExecContext(ctx, releaseClaimSQL, c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
	return dbErr(err)
}

// Lookup implements idempotency.Store.
func (s *Store) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	var now time.Time // lookupColumns
	var row recordRow
	// Prepared, as the key statements are: a retry's replay is this read.
	if err := s.queryRow(ctx, nil, lookupKeySQL, []any{s.now(), sc.Actor, sc.Operation, sc.Key}, row.dest(&now)...); err != nil {
		return nil, time.Time{}, err
	}
	rec, err := row.record()
	return rec, now, err
}

// InProgress returns how many claims are in progress, how many of them need
// attention (idempotency.NeedsAttentionLease), the claim time of the oldest
// and the store's time.
func (s *Store) InProgress(ctx context.Context) (n, needsAttention int, oldest, now time.Time, err error) {
	var row struct {
		N              int          `db:"n"`
		NeedsAttention int          `db:"needs_attention"`
		Oldest         sql.NullTime `db:"oldest"`
		Now            time.Time    `db:"now"`
	}
	err = s.db.GetContext(ctx, &row, countInProgressClaimsSQL, s.now(), (idempotency.NeedsAttentionLease / 2).Microseconds())
	if err != nil {
		return 0, 0, time.Time{}, time.Time{}, fmt.Errorf("count in-progress claims: %w", dbErr(err))
	}
	return row.N, row.NeedsAttention, row.Oldest.Time, row.Now, nil
}
