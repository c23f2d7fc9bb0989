package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// claimSQL is the claim: one statement, committed on its own, so a concurrent
// request sees the in-progress row at once. The unique scope decides the race.
// Its parts run on one snapshot:
//
//   - prev reads the row as it was, so a request that does not claim learns
//     in the same round trip whether to replay, wait or refuse;
//   - fresh inserts a new row; ON CONFLICT DO NOTHING skips it, without a
//     lock or a write, when the scope is taken;
//   - takeover replaces a row that expired, or whose owner's lease passed
//     with the same fingerprint (the same cases as idempotency.Decide). It
//     locks only a row it takes over and rechecks that row once it holds the
//     lock, so of two racing takeovers one wins.
//
// A replay or a 409 therefore writes nothing: it costs a read, not a commit.
//
// A claim must be visible at once, not durable, so it commits without waiting
// for its WAL flush (synchronous_commit off for this transaction alone). A
// crash may lose a claim, never a creation: the finish commits durably, and
// flushing its commit flushes the claim before it; a finish whose claim was
// lost finds no row, creates nothing, and the retry claims again.
const claimSQL = `
WITH clock AS (
    SELECT coalesce($7::timestamptz, now()) AS now
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), prev AS (
    SELECT payload_hash, state, locked_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
), fresh AS (
    INSERT INTO idempotency_keys
        (actor_id, operation, idem_key, payload_hash, state, claim_token,
         locked_until, created_at, expires_at)
    SELECT $1, $2, $3, $4, 'in_progress', $5::uuid,
           clock.now + $6::bigint * interval '1 microsecond', clock.now,
           clock.now + $8::bigint * interval '1 microsecond'
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING 1
), takeover AS (
    UPDATE idempotency_keys k SET
        payload_hash = $4, state = 'in_progress', claim_token = $5::uuid,
        locked_until = clock.now + $6::bigint * interval '1 microsecond',
        status_code = NULL, response_body = NULL, response_headers = NULL,
        result_id = NULL, created_at = clock.now, completed_at = NULL,
        expires_at = clock.now + $8::bigint * interval '1 microsecond'
    FROM clock
    WHERE k.actor_id = $1 AND k.operation = $2 AND k.idem_key = $3
      AND ((k.expires_at <= clock.now AND (k.state = 'completed' OR k.locked_until <= clock.now))
           OR (k.state = 'in_progress' AND k.locked_until <= clock.now AND k.payload_hash = $4))
    RETURNING 1
)
SELECT clock.now, EXISTS (SELECT 1 FROM fresh UNION ALL SELECT 1 FROM takeover) AS claimed, prev.*
FROM clock CROSS JOIN async_commit LEFT JOIN prev ON true`

// recordRow is a row of idempotency_keys as scanned.
type recordRow struct {
	PayloadHash     sql.NullString `db:"payload_hash"`
	State           sql.NullString `db:"state"`
	LockedUntil     sql.NullTime   `db:"locked_until"`
	StatusCode      sql.NullInt64  `db:"status_code"`
	ResponseBody    []byte         `db:"response_body"`
	ResponseHeaders []byte         `db:"response_headers"`
	ResultID        sql.NullString `db:"result_id"`
	CreatedAt       sql.NullTime   `db:"created_at"`
	CompletedAt     sql.NullTime   `db:"completed_at"`
	ExpiresAt       sql.NullTime   `db:"expires_at"`
}

// record converts the row, nil when the LEFT JOIN found none.
func (r recordRow) record() (*idempotency.Record, error) {
	if !r.State.Valid {
		return nil, nil
	}
	rec := &idempotency.Record{
		Fingerprint: r.PayloadHash.String,
		State:       idempotency.State(r.State.String),
		LockedUntil: r.LockedUntil.Time,
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

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, sc idempotency.Scope, fp string, lease, ttl time.Duration) (idempotency.ClaimResult, error) {
	token := uuid.NewString()
	var row struct {
		Now     time.Time `db:"now"`
		Claimed bool      `db:"claimed"`
		recordRow
	}
	st, err := s.prepared(ctx, claimSQL)
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	err = st.QueryRowxContext(ctx, sc.Actor, sc.Operation, sc.Key, fp, token,
		lease.Microseconds(), s.now(), ttl.Microseconds()).StructScan(&row)
	if err != nil {
		return idempotency.ClaimResult{}, dbErr(err)
	}
	prev, err := row.record()
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	res := idempotency.ClaimResult{Claimed: row.Claimed, Prev: prev, Now: row.Now}
	if row.Claimed {
		res.Claim = idempotency.Claim{Scope: sc, Token: token, Now: row.Now}
	}
	return res, nil
}

// finishSQL returns the finish statement of an operation. It completes the
// key and runs effect (if any) in ONE statement, hence one transaction: the
// key becomes completed only if its claim token is still the caller's, and the
// business row exists only if the key was completed.
//
// effect is the operation's business write: SQL that selects FROM the CTE
// "fenced" (one row only while the claim still holds the key), with
// placeholders $1…$nArgs. For example:
//
//	INSERT INTO t (a, b) SELECT $1, $2 FROM fenced
//
// One statement instead of BEGIN … COMMIT keeps a create at two round trips
// (claim, finish) and leaves no commit error to lose. The text is built once,
// when the package loads; an effect that does not read fenced would commit
// without the claim, so it panics then.
func finishSQL(effect string, nArgs int) string {
	if effect != "" && !strings.Contains(effect, "FROM fenced") {
		panic("postgres: a business write must select FROM fenced: " + effect)
	}
	p := func(i int) string { return "$" + strconv.Itoa(nArgs+i) }
	q := `WITH fenced AS (
    UPDATE idempotency_keys SET state = 'completed', locked_until = NULL,
        status_code = ` + p(1) + `, response_body = ` + p(2) + `, response_headers = ` + p(3) + `::jsonb,
        result_id = nullif(` + p(4) + `, ''), completed_at = coalesce(` + p(5) + `::timestamptz, now())
    WHERE actor_id = ` + p(6) + ` AND operation = ` + p(7) + ` AND idem_key = ` + p(8) + `
      AND claim_token = ` + p(9) + `::uuid AND state = 'in_progress'
    RETURNING 1
)`
	if effect == "" {
		return q + `
SELECT (SELECT count(*) FROM fenced) AS fenced, 1 AS effect`
	}
	return q + `, effect AS (` + effect + ` RETURNING 1)
SELECT (SELECT count(*) FROM fenced) AS fenced, (SELECT count(*) FROM effect) AS effect`
}

// finishOnlySQL completes a key with no business write (a refusal).
var finishOnlySQL = finishSQL("", 0)

// finish runs query, a statement of finishSQL, for claim c and response resp;
// effectArgs fill the business write's placeholders. A finish that lost its
// lease changes nothing and returns ErrLeaseLost.
func (s *Store) finish(ctx context.Context, query string, c idempotency.Claim, resp idempotency.Response, effectArgs ...any) error {
	headers, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	args := append(effectArgs, resp.Status, resp.Body, string(headers), resp.ResultID, s.now(),
		c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
	st, err := s.prepared(ctx, query)
	if err != nil {
		return err
	}
	var got struct {
		Fenced int `db:"fenced"`
		Effect int `db:"effect"`
	}
	if err := st.QueryRowxContext(ctx, args...).StructScan(&got); err != nil {
		return dbErr(err)
	}
	switch {
	case got.Fenced == 0:
		return idempotency.ErrLeaseLost
	case got.Effect == 0:
		// The effect filtered out the fenced row: the key is completed
		// without its business row. A bug in the effect; say so loudly.
		return fmt.Errorf("finish: the business write of %s inserted nothing", c.Scope.Operation)
	}
	return nil
}

// Finish implements idempotency.Store.
func (s *Store) Finish(ctx context.Context, c idempotency.Claim, resp idempotency.Response) error {
	return s.finish(ctx, finishOnlySQL, c, resp)
}

// Release implements idempotency.Store: it deletes the claim while it is
// still c's and still in progress, so the next request with the key runs as a
// first one. A finish whose commit went through unseen (the connection broke
// after it) left the key completed, and the release leaves it alone.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	_, err := s.db.ExecContext(ctx, `
DELETE FROM idempotency_keys
WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
  AND claim_token = $4::uuid AND state = 'in_progress'`,
		c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
	return dbErr(err)
}

// Lookup implements idempotency.Store.
func (s *Store) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	var row struct {
		Now time.Time `db:"now"`
		recordRow
	}
	err := s.db.QueryRowxContext(ctx, `
WITH clock AS (SELECT coalesce($4::timestamptz, now()) AS now)
SELECT clock.now, k.payload_hash, k.state, k.locked_until, k.status_code, k.response_body,
       k.response_headers, k.result_id, k.created_at, k.completed_at, k.expires_at
FROM clock LEFT JOIN idempotency_keys k
  ON k.actor_id = $1 AND k.operation = $2 AND k.idem_key = $3`,
		sc.Actor, sc.Operation, sc.Key, s.now()).StructScan(&row)
	if err != nil {
		return nil, time.Time{}, dbErr(err)
	}
	rec, err := row.record()
	return rec, row.Now, err
}

// PurgeExpired deletes up to batch expired records: completed ones past their
// TTL, and abandoned claims past both their TTL and their lease. A claim
// whose lease is alive is never deleted. It returns how many it deleted.
func (s *Store) PurgeExpired(ctx context.Context, batch int) (int64, error) {
	res, err := s.db.ExecContext(ctx, `
DELETE FROM idempotency_keys
WHERE (actor_id, operation, idem_key) IN (
    SELECT actor_id, operation, idem_key
    FROM idempotency_keys, (SELECT coalesce($2::timestamptz, now()) AS now) clock
    WHERE expires_at <= clock.now
      AND (state = 'completed' OR locked_until <= clock.now)
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE OF idempotency_keys SKIP LOCKED
)`, batch, s.now())
	if err != nil {
		return 0, fmt.Errorf("purge expired keys: %w", dbErr(err))
	}
	return res.RowsAffected()
}

// InProgress returns how many claims are in progress and the claim time of
// the oldest (zero when there is none), and the store's time.
func (s *Store) InProgress(ctx context.Context) (n int, oldest, now time.Time, err error) {
	var row struct {
		N      int          `db:"n"`
		Oldest sql.NullTime `db:"oldest"`
		Now    time.Time    `db:"now"`
	}
	err = s.db.GetContext(ctx, &row, `
SELECT count(*) AS n, min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE locked_until IS NOT NULL -- in progress, by the table's CHECK
`, s.now())
	if err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("count in-progress claims: %w", dbErr(err))
	}
	return row.N, row.Oldest.Time, row.Now, nil
}
