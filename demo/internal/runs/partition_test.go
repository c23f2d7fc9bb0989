package runs_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// muteAtClaim is the real store behind a proxy that, from the step-wise
// claim on, drops every answer of the database: the claim commits, and its
// reply is lost in the partition, as is everything after it until the test
// heals the link.
type muteAtClaim struct {
	*runs.Store
	proxy *pgtest.Proxy
	once  sync.Once
}

func (s *muteAtClaim) ClaimRun(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration, input json.RawMessage) (idempotency.KeyWrite, error) {
	s.once.Do(func() { s.proxy.Set(pgtest.LinkMute) }) // the first claim's only
	return s.Store.ClaimRun(ctx, c, fp, lease, ttl, input)
}

// TestStepClaimReplyLostInAPartition: the reply to a step-wise operation's
// first claim is lost in a partition (the claim committed), so its runner
// answers 503. Its release of the key keeps trying, by the claim token, and
// goes through once the link heals: the client's retries, sent every
// 200 ms from the heal, are answered within 3 s, not refused with 409 for
// the rest of the claim's 30 s lease. The test logs how long they got 409.
func TestStepClaimReplyLostInAPartition(t *testing.T) {
	testenv.Long(t, "fault injection (a partition)")
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	direct, err := sqlx.Open("postgres", dbURL) // the same database, not through the proxy
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	proxied, proxy := pgtest.Proxied(t, dbURL)
	db, err := postgres.Open(ctx, proxied, postgres.KeyStatements)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() { proxy.Set(pgtest.LinkCut) })
	store := &muteAtClaim{Store: runs.New(postgres.New(db)), proxy: proxy}
	r, err := steps.NewRunner(idempotency.Config{TTL: ttl, Lease: lease}, store)
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "partition.steps", Key: "key-partition"},
		Fingerprint: "fp", Path: steps.StepWise}
	op := &steps.Steps{
		Operation: req.Scope.Operation, MaxAttempts: 8, Limit: 10 * time.Minute,
		Steps: []steps.Step{
			{Name: "recorded", Local: func(context.Context, *steps.Run, time.Time) (idempotency.Effect, error) { return nil, nil }},
		},
		Finish: func(context.Context, *steps.Run, time.Time) (idempotency.Answer, error) {
			return idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte(`{}`)}}, nil
		},
	}
	// The claim's statement is prepared on the connection first, so that
	// only its reply is lost, not its preparation.
	warm := req
	warm.Scope.Key = "key-warm"
	if _, err := store.Store.ClaimRun(ctx, idempotency.Claim{Scope: warm.Scope, Token: uuid.NewString()}, "fp", lease, ttl, json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do(ctx, req, op, json.RawMessage(`{}`), ""); apperr.Code(err) != apperr.Unavailable {
		t.Fatalf("the attempt whose claim reply was lost: %v, want unavailable", err)
	}
	if n := count(t, direct, `SELECT count(*) FROM idempotency_keys k JOIN runs USING (actor_id, operation, idem_key)
		WHERE k.idem_key = $1 AND k.state = 'in_progress'`, req.Scope.Key); n != 1 {
		t.Fatalf("%d claims with their run committed by the attempt, want 1: the reply, not the claim, is what the partition lost", n)
	}
	proxy.Set(pgtest.LinkUp)
	healed := time.Now()
	var res idempotency.Result
	var conflicts int
	for {
		res, err = r.Do(ctx, req, op, json.RawMessage(`{}`), "")
		if apperr.Code(err) != apperr.OperationInProgress || time.Since(healed) > lease+5*time.Second {
			break
		}
		conflicts++
		time.Sleep(200 * time.Millisecond)
	}
	blocked := time.Since(healed)
	t.Logf("after the heal, the key answered 409 to %d retries, for %v", conflicts, blocked.Round(100*time.Millisecond))
	if err != nil || res.Response.Status != 201 {
		t.Fatalf("the retry after the heal: %+v, %v; want the 201", res, err)
	}
	if blocked > 3*time.Second {
		t.Errorf("the key answered 409 for %v after the heal, want at most 3 s", blocked.Round(100*time.Millisecond))
	}
}
