package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// lostRunClaimReply is the real store, except that the reply to the
// step-wise claim is lost after the claim committed (a connection broken by
// a partition), and, while partitioned, nothing else this runner sends
// reaches the database: the partition outlasts the runner.
type lostRunClaimReply struct {
	*runs.Store
	mu          sync.Mutex
	lose        bool // the next claim's reply is lost
	partitioned bool // the runner's later writes do not arrive
}

var errReset = &apperr.Error{Code: apperr.Unavailable, Message: "connection reset", Err: errors.New("read: connection reset by peer")}

func (s *lostRunClaimReply) lost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	lose := s.lose
	s.lose = false
	return lose
}

func (s *lostRunClaimReply) cut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partitioned
}

func (s *lostRunClaimReply) ClaimRun(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration, input json.RawMessage) (idempotency.KeyWrite, error) {
	cr, err := s.Store.ClaimRun(ctx, c, fp, lease, ttl, input)
	if err == nil && s.lost() {
		return idempotency.KeyWrite{}, errReset
	}
	return cr, err
}

func (s *lostRunClaimReply) ReleaseRun(ctx context.Context, c idempotency.Claim) error {
	if s.cut() {
		return errReset
	}
	return s.Store.ReleaseRun(ctx, c)
}

// oneCallSteps is an operation of two steps, a local one and a call to
// another system (kept in memory: the test is about the database), whose
// answer is a 201.
func oneCallSteps() *steps.Steps {
	var mu sync.Mutex
	sent := map[string]string{}
	return &steps.Steps{
		Operation: "steps.test", MaxAttempts: 8, Limit: 10 * time.Minute,
		Steps: []steps.Step{
			{Name: "recorded", Local: func(context.Context, *steps.Run, time.Time) (idempotency.Effect, error) { return nil, nil }},
			{Name: "called", External: &steps.External{
				Key: func(run *steps.Run) string { return "call:" + run.Scope.Key },
				Call: func(_ context.Context, key string, _ *steps.Run) (string, error) {
					mu.Lock()
					defer mu.Unlock()
					sent[key] = "REF-" + key
					return sent[key], nil
				},
				Status: func(_ context.Context, key string) (string, error) {
					mu.Lock()
					defer mu.Unlock()
					if ref, ok := sent[key]; ok {
						return ref, nil
					}
					return "", steps.ErrNotSent
				},
			}},
		},
		Finish: func(_ context.Context, run *steps.Run, _ time.Time) (idempotency.Answer, error) {
			return idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte(`{"ref":"` + run.Refs["called"] + `"}`)}}, nil
		},
	}
}

// TestLostStepClaimReply: the reply to a step-wise operation's first claim
// is lost (a partition), so its runner answers 503 without knowing whether
// it holds the key.
//
// When the database answers again while the runner lives, the runner lets
// go of the claim by its token (in the background, as the two-phase path
// releases its claim), so the client's retry right after the heal is
// answered, not refused with 409 for the rest of a 30 s lease.
//
// When the partition outlasts the runner, the claim is left behind: it
// holds its run from its first commit, so once its lease passes the
// completer takes it and settles it, and the outcome route shows the
// answer.
func TestLostStepClaimReply(t *testing.T) {
	const lease = 30 * time.Second
	setup := func(t *testing.T) (*lostRunClaimReply, *testenv.Clock, *steps.Runner, idempotency.Request) {
		t.Parallel()
		db := pgtest.NewDB(t)
		store := &lostRunClaimReply{Store: runs.New(postgres.New(db)), lose: true}
		clock := testenv.NewClock()
		store.Clock = clock.Now
		r, err := steps.NewRunner(idempotency.Config{TTL: time.Hour, Lease: lease}, store)
		if err != nil {
			t.Fatal(err)
		}
		return store, clock, r, idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "steps.test", Key: "k"},
			Fingerprint: "fp", Path: steps.StepWise}
	}
	input := json.RawMessage(`{"n":1}`)

	t.Run("the retry after the heal is answered", func(t *testing.T) {
		store, _, r, req := setup(t)
		op := oneCallSteps()
		if _, err := r.Do(context.Background(), req, op, input, ""); apperr.Code(err) != apperr.Unavailable {
			t.Fatalf("the attempt whose claim reply was lost: %v, want unavailable", err)
		}
		res, err := r.Do(context.Background(), req, op, input, "")
		if err != nil || res.Response.Status != 201 {
			t.Fatalf("the retry right after the heal: %+v, %v; want the 201, not a 409 for the lease", res, err)
		}
		_ = store
	})

	t.Run("a claim left behind is the completer's", func(t *testing.T) {
		store, clock, r, req := setup(t)
		store.partitioned = true // the runner never reaches the database again
		op := oneCallSteps()
		if _, err := r.Do(context.Background(), req, op, input, ""); apperr.Code(err) != apperr.Unavailable {
			t.Fatalf("the attempt whose claim reply was lost: %v, want unavailable", err)
		}
		clock.Advance(lease + time.Second)
		n, err := r.CompleteAbandoned(context.Background(), []*steps.Steps{op}, 10)
		if err != nil || n != 1 {
			t.Fatalf("the completer took %d runs (%v), want the one its claim left", n, err)
		}
		rec, _, err := store.Lookup(context.Background(), req.Scope)
		if err != nil || rec == nil || rec.State != idempotency.StateCompleted || rec.Response.Status != 201 {
			t.Fatalf("the key after the completer: %+v, %v; want completed with the 201", rec, err)
		}
	})
}
