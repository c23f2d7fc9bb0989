package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// lostClaimReply is the real store, except that the reply to a claim is
// lost after the claim committed: what a broken connection does.
type lostClaimReply struct {
	*postgres.Store
	lose bool
}

func (s *lostClaimReply) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (idempotency.KeyWrite, error) {
	cr, err := s.Store.Claim(ctx, c, fp, lease, ttl)
	if s.lose && err == nil {
		s.lose = false
		return idempotency.KeyWrite{}, &apperr.Error{Code: apperr.Unavailable, Message: "connection reset", Err: errors.New("read: connection reset by peer")}
	}
	return cr, err
}

// TestLostClaimReplyDoesNotBlockTheKey: a claim committed, but its requester
// never learned it. The requester releases it by its token, so the retry
// runs at once instead of getting 409 for a whole lease.
func TestLostClaimReplyDoesNotBlockTheKey(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	store := &lostClaimReply{Store: postgres.New(db), lose: true}
	r, err := idempotency.NewRunner(idempotency.Config{Store: store, TTL: time.Hour, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: idempotency.Scope{Actor: "alice", Operation: "op", Key: "k"}, Fingerprint: "fp", Path: idempotency.TwoPhase}
	work := func(context.Context, time.Time) (idempotency.Answer, error) {
		return idempotency.Answer{Response: idempotency.Response{Status: 200, Body: []byte(`{}`)}}, nil
	}
	if _, err := r.Do(context.Background(), req, work); apperr.Code(err) != apperr.Unavailable {
		t.Fatalf("the request whose claim reply was lost: %v, want unavailable", err)
	}
	if n := testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'`); n != 0 {
		t.Fatalf("%d claims left in progress by a lost reply, want 0", n)
	}
	res, err := r.Do(context.Background(), req, work)
	if err != nil || res.Outcome != idempotency.OutcomeClaimed {
		t.Fatalf("the retry: %+v, %v; want a fresh claim, not a 409", res, err)
	}
}

func TestNewRunnerRefusesIncompleteConfig(t *testing.T) {
	store := postgres.New(nil)
	for name, cfg := range map[string]idempotency.Config{
		"no store":        {TTL: time.Hour, Lease: time.Second},
		"no lease":        {Store: store, TTL: time.Hour},
		"TTL below lease": {Store: store, TTL: time.Second, Lease: time.Minute},
	} {
		if _, err := idempotency.NewRunner(cfg); err == nil {
			t.Errorf("%s: NewRunner accepted it", name)
		}
	}
}

// TestInProgressAlwaysSaysWhen: a request that meets a key held by an
// ordinary claim gets 409 with a Retry-After, also where the lease ends a
// little more than a lease away (a statement's now is taken when it starts,
// before it waited on the claim's row), or later than the key's creation
// plus its TTL (an operation of several steps renews its lease as it goes).
func TestInProgressAlwaysSaysWhen(t *testing.T) {
	t.Parallel()
	const lease = 4 * time.Second // the TTL too
	for _, tc := range []struct {
		name  string
		late  time.Duration // how far the request's statements' now is behind the claim's
		renew bool          // a step ends 3 s after the claim and renews the lease
	}{
		{name: "read a moment late", late: 50 * time.Millisecond},
		{name: "a renewed lease", renew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			clock := testenv.NewClock()
			owner, reader := postgres.New(db), postgres.New(db)
			owner.Clock = clock.Now
			reader.Clock = func() time.Time { return clock.Now().Add(-tc.late) }
			r, err := idempotency.NewRunner(idempotency.Config{Store: reader, TTL: lease, Lease: lease, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			sc := idempotency.Scope{Actor: t.Name(), Operation: "op", Key: "k"}
			if w, err := owner.Claim(context.Background(), idempotency.Claim{Scope: sc, Token: "00000000-0000-4000-8000-000000000001"}, "fp", lease, lease); err != nil || !w.Wrote {
				t.Fatalf("claim: %+v, %v", w, err)
			}
			if tc.renew {
				clock.Advance(3 * time.Second)
				db.MustExec(`UPDATE idempotency_keys SET lease_until = $1 WHERE actor_id = $2`, clock.Now().Add(lease), sc.Actor)
			}
			_, err = r.Do(context.Background(), idempotency.Request{Scope: sc, Fingerprint: "fp", Path: idempotency.TwoPhase},
				func(context.Context, time.Time) (idempotency.Answer, error) {
					t.Fatal("the work ran while another request held the key")
					return idempotency.Answer{}, nil
				})
			var ae *apperr.Error
			if !errors.As(err, &ae) || ae.Code != apperr.OperationInProgress || ae.RetryAfter < time.Second {
				t.Fatalf("Do: %v, want operation_in_progress with a Retry-After", err)
			}
		})
	}
}
