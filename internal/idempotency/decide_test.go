package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const lease = 30 * time.Second

// decideCase is a stored record, relative to now, and what a request with
// fingerprint fp decides on it.
type decideCase struct {
	name string
	prev *idempotency.Record // times relative to the zero time: added to now
	fp   string
	want idempotency.Decision
}

func completed(fp string, expiresIn time.Duration) *idempotency.Record {
	return &idempotency.Record{Fingerprint: fp, State: idempotency.StateCompleted, CreatedAt: at(-time.Minute), ExpiresAt: at(expiresIn)}
}

// inProgress is a claim made lease-leaseLeft ago with the lease of 30 s.
func inProgress(fp string, leaseLeft, expiresIn time.Duration) *idempotency.Record {
	return &idempotency.Record{Fingerprint: fp, State: idempotency.StateInProgress,
		CreatedAt: at(leaseLeft - lease), LeaseUntil: at(leaseLeft), ExpiresAt: at(expiresIn)}
}

// at is an offset from now, kept as a time after the zero time.
func at(d time.Duration) time.Time { return time.Time{}.Add(24*time.Hour + d) }

func shift(r *idempotency.Record, now time.Time) *idempotency.Record {
	if r == nil {
		return nil
	}
	c := *r
	base := time.Time{}.Add(24 * time.Hour)
	c.CreatedAt = now.Add(r.CreatedAt.Sub(base))
	c.ExpiresAt = now.Add(r.ExpiresAt.Sub(base))
	if !r.LeaseUntil.IsZero() {
		c.LeaseUntil = now.Add(r.LeaseUntil.Sub(base))
	}
	return &c
}

var decideCases = []decideCase{
	{"nothing stored", nil, "a", idempotency.Decision{Kind: idempotency.ClaimNew}},
	{"completed, same payload", completed("a", time.Hour), "a", idempotency.Decision{Kind: idempotency.Replay}},
	{"completed, other payload", completed("a", time.Hour), "b", idempotency.Decision{Kind: idempotency.Mismatch}},
	{"completed, expired", completed("a", -time.Second), "a", idempotency.Decision{Kind: idempotency.TakeOverExpired}},
	{"completed, expires this instant", completed("a", 0), "a", idempotency.Decision{Kind: idempotency.TakeOverExpired}},
	{"completed, expired, other payload is a new intent", completed("a", -time.Second), "b", idempotency.Decision{Kind: idempotency.TakeOverExpired}},
	{"in progress, work running", inProgress("a", 25*time.Second, time.Hour), "a",
		idempotency.Decision{Kind: idempotency.InProgress, WorkLeft: 10 * time.Second, LeaseLeft: 25 * time.Second}},
	{"in progress, past the work's deadline, lease alive", inProgress("a", 10*time.Second, time.Hour), "a",
		idempotency.Decision{Kind: idempotency.InProgress, LeaseLeft: 10 * time.Second}},
	{"in progress, lease alive, other payload", inProgress("a", 10*time.Second, time.Hour), "b", idempotency.Decision{Kind: idempotency.Mismatch}},
	{"in progress, lease passed", inProgress("a", -time.Second, time.Hour), "a", idempotency.Decision{Kind: idempotency.TakeOverLease}},
	{"in progress, lease ends this instant", inProgress("a", 0, time.Hour), "a", idempotency.Decision{Kind: idempotency.TakeOverLease}},
	{"in progress, lease passed, other payload", inProgress("a", -time.Second, time.Hour), "b", idempotency.Decision{Kind: idempotency.Mismatch}},
	{"in progress past TTL, lease alive", inProgress("a", time.Second, -time.Second), "a",
		idempotency.Decision{Kind: idempotency.InProgress, LeaseLeft: time.Second}},
	{"in progress past TTL and lease", inProgress("a", -time.Second, -time.Second), "a", idempotency.Decision{Kind: idempotency.TakeOverLease}},
	{"in progress past TTL and lease, other payload", inProgress("a", -time.Second, -time.Second), "b", idempotency.Decision{Kind: idempotency.Mismatch}},
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tt := range decideCases {
		t.Run(tt.name, func(t *testing.T) {
			if got := idempotency.Decide(shift(tt.prev, now), tt.fp, now); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		d    idempotency.Decision
		want time.Duration
	}{
		{idempotency.Decision{Kind: idempotency.InProgress, WorkLeft: 10 * time.Second, LeaseLeft: 25 * time.Second}, 10 * time.Second},
		{idempotency.Decision{Kind: idempotency.InProgress, LeaseLeft: 7 * time.Second}, 7 * time.Second},
		{idempotency.Decision{Kind: idempotency.InProgress, WorkLeft: time.Millisecond, LeaseLeft: 15 * time.Second}, time.Second},
	} {
		if got := tt.d.RetryAfter(); got != tt.want {
			t.Errorf("%+v: RetryAfter = %v, want %v", tt.d, got, tt.want)
		}
	}
}

// TestDecideAgreesWithTheStatements runs every row of the Decide table
// against the real claim statement and the real one-phase statement: each
// writes the key exactly when Decide says claim or take over, and reports
// the record that Decide read.
func TestDecideAgreesWithTheStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t) // each case has a scope of its own: its name
	for _, path := range []idempotency.Path{idempotency.TwoPhase, idempotency.OnePhase} {
		for _, tt := range decideCases {
			t.Run(string(path)+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				clk := testenv.NewClock()
				s := postgres.New(db)
				s.Clock = clk.Now
				sc := idempotency.Scope{Actor: "alice", Operation: "op", Key: t.Name()}
				if prev := shift(tt.prev, clk.Now()); prev != nil {
					_, err := db.Exec(`INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state,
						claim_token, lease_until, status_code, response_body, created_at, expires_at)
						VALUES ('alice', 'op', $9, $1, $2, $3, $4, $5, $6, $7, $8)`,
						prev.Fingerprint, prev.State, uuid.NewString(), nullTime(prev.LeaseUntil),
						map[bool]any{true: 200, false: nil}[prev.State == idempotency.StateCompleted],
						map[bool]any{true: []byte("{}"), false: nil}[prev.State == idempotency.StateCompleted],
						prev.CreatedAt, prev.ExpiresAt, sc.Key)
					if err != nil {
						t.Fatal(err)
					}
				}
				var cr idempotency.KeyWrite
				var err error
				if path == idempotency.TwoPhase {
					cr, err = s.Claim(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, tt.fp, lease, time.Hour)
				} else {
					cr, err = s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, tt.fp, time.Hour,
						idempotency.Answer{Response: idempotency.Response{Status: 422, Body: []byte(`{}`)}})
				}
				if err != nil {
					t.Fatal(err)
				}
				got := idempotency.Decide(cr.Prev, tt.fp, cr.Now)
				if got.Kind != tt.want.Kind {
					t.Fatalf("Decide on the statement's record = %v, want %v", got.Kind, tt.want.Kind)
				}
				writes := tt.want.Kind == idempotency.ClaimNew || tt.want.Kind == idempotency.TakeOverExpired || tt.want.Kind == idempotency.TakeOverLease
				if cr.Wrote != writes {
					t.Fatalf("statement claimed = %v, Decide says %v", cr.Wrote, tt.want.Kind)
				}
				wantState := map[bool]string{true: "in_progress", false: "completed"}[path == idempotency.TwoPhase]
				if writes && testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idem_key = $1 AND fingerprint = $2 AND state = $3`, sc.Key, tt.fp, wantState) != 1 {
					t.Fatalf("the statement said it wrote the key, but no %s row has the new fingerprint", wantState)
				}
			})
		}
	}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
