package runs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/demo/internal/runs"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// claimRun claims sc for a step-wise operation with input.
func claimRun(t *testing.T, s *runs.Store, sc idempotency.Scope, fp, input string) (idempotency.KeyWrite, idempotency.Claim) {
	t.Helper()
	c := idempotency.Claim{Scope: sc, Token: uuid.NewString()}
	cr, err := s.ClaimRun(context.Background(), c, fp, lease, ttl, json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	return cr, c
}

func loadRun(t *testing.T, s *runs.Store, sc idempotency.Scope) *steps.Run {
	t.Helper()
	run, _, err := s.LoadRun(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestRunClaimAndRelease: a step-wise claim writes its run in the same
// statement, so a claim never exists without the run a completer needs;
// ReleaseRun, fenced by the claim token, frees the key of a run that did
// nothing yet and ends the lease of one under way, and leaves a run that
// needs attention alone.
func TestRunClaimAndRelease(t *testing.T) {
	ctx := context.Background()
	sc := idempotency.Scope{Actor: "alice", Operation: "demo-requests.expedite", Key: "k-run"}
	ops := []string{sc.Operation}
	lookup := func(t *testing.T, s *runs.Store) *idempotency.Record {
		t.Helper()
		rec, _, err := s.Lookup(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}

	t.Run("a claim writes its run; a takeover keeps it, or starts a new one after a done run expired", func(t *testing.T) {
		s, _, clock := newStore(t)
		if cr, _ := claimRun(t, s, sc, "fp", `{"n":1}`); !cr.Wrote {
			t.Fatalf("first claim = %+v", cr)
		}
		run := loadRun(t, s, sc)
		if run == nil || run.Point != "" || run.State != steps.RunRunning || string(run.Input) != `{"n": 1}` || run.Attempts != 0 {
			t.Fatalf("the run the claim wrote: %+v, want one at its start with the input", run)
		}
		if cr, _ := claimRun(t, s, sc, "fp", `{"n":1}`); cr.Wrote {
			t.Fatal("a second claim took a key in progress")
		}
		// Its runner died after its first recovery point.
		clock.Advance(lease + time.Second)
		cr, c := claimRun(t, s, sc, "fp", `{"n":1}`)
		if !cr.Wrote {
			t.Fatalf("takeover after the lease = %+v", cr)
		}
		run.Point, run.Attempts = "ordered", 1
		if err := s.SaveRun(ctx, c, run, nil, lease); err != nil {
			t.Fatal(err)
		}
		clock.Advance(lease + time.Second)
		cr, c = claimRun(t, s, sc, "fp", `{"n":1}`)
		if got := loadRun(t, s, sc); !cr.Wrote || got.Point != "ordered" || got.Attempts != 1 {
			t.Fatalf("the run after a takeover: %+v (claimed %v), want it as it stood", got, cr.Wrote)
		}
		if err := s.FinishRun(ctx, c, idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(ttl + time.Second)
		if cr, _ := claimRun(t, s, sc, "fp-2", `{"n":2}`); !cr.Wrote {
			t.Fatalf("claim after the TTL = %+v", cr)
		}
		if got := loadRun(t, s, sc); got.Point != "" || got.State != steps.RunRunning || string(got.Input) != `{"n": 2}` || got.Attempts != 0 {
			t.Fatalf("the run of a new intent after a done run expired: %+v, want a new one", got)
		}
	})

	t.Run("a claim whose runner died before its first point is the completer's", func(t *testing.T) {
		s, _, clock := newStore(t)
		claimRun(t, s, sc, "fp", `{}`)
		clock.Advance(lease + time.Second)
		taken, err := s.TakeAbandonedRuns(ctx, ops, 10, lease)
		if err != nil || len(taken) != 1 || taken[0].Run.Point != "" {
			t.Fatalf("the completer took %+v (%v), want the run at its start", taken, err)
		}
	})

	t.Run("release of a run that did nothing frees the key", func(t *testing.T) {
		s, db, _ := newStore(t)
		_, c := claimRun(t, s, sc, "fp", `{}`)
		other := idempotency.Claim{Scope: sc, Token: uuid.NewString()}
		if err := s.ReleaseRun(ctx, other); err != nil || lookup(t, s) == nil {
			t.Fatalf("a release by another token: %v, the key %+v; want it kept", err, lookup(t, s))
		}
		if err := s.ReleaseRun(ctx, c); err != nil {
			t.Fatal(err)
		}
		if rec := lookup(t, s); rec != nil || count(t, db, `SELECT count(*) FROM runs`) != 0 {
			t.Fatalf("after the release: key %+v, %d runs; want neither", rec, count(t, db, `SELECT count(*) FROM runs`))
		}
	})

	t.Run("release of a run under way ends its lease now", func(t *testing.T) {
		s, _, clock := newStore(t)
		_, c := claimRun(t, s, sc, "fp", `{}`)
		run := loadRun(t, s, sc)
		run.Point, run.Attempts = "ordered", 1
		if err := s.SaveRun(ctx, c, run, nil, lease); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseRun(ctx, c); err != nil {
			t.Fatal(err)
		}
		if rec := lookup(t, s); rec == nil || !rec.LeaseUntil.Equal(clock.Now()) {
			t.Fatalf("the key after the release: %+v, want its lease ended at %v", rec, clock.Now())
		}
		taken, err := s.TakeAbandonedRuns(ctx, ops, 10, lease)
		if err != nil || len(taken) != 1 || taken[0].Run.Point != "ordered" {
			t.Fatalf("the completer took %+v (%v), want the run at ordered at once", taken, err)
		}
	})

	t.Run("release leaves a run that needs attention alone", func(t *testing.T) {
		s, _, _ := newStore(t)
		_, c := claimRun(t, s, sc, "fp", `{}`)
		run := loadRun(t, s, sc)
		run.Point, run.State = "ordered", steps.RunNeedsAttention
		if err := s.SaveRun(ctx, c, run, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
		before := lookup(t, s).LeaseUntil
		if err := s.ReleaseRun(ctx, c); err != nil {
			t.Fatal(err)
		}
		if rec := lookup(t, s); rec == nil || !rec.LeaseUntil.Equal(before) {
			t.Fatalf("the key after the release: %+v, want its lease kept", rec)
		}
	})
}
