package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// branchEnv is a Runner on a real store whose clock a test moves.
type branchEnv struct {
	t     *testing.T
	db    *sqlx.DB
	store *postgres.Store
	clock *testenv.Clock
	r     *idempotency.Runner
	scope idempotency.Scope
	retry bool // the request under test says it is a retry (X-Client-Attempt ≥ 2)
}

// paths are the two ways an operation commits; every branch runs on both.
var paths = []idempotency.Path{idempotency.OnePhase, idempotency.TwoPhase}

const (
	branchLease = 30 * time.Second
	branchTTL   = time.Hour
)

// newBranchEnv is a Runner of its own on db, with a clock of its own, for an
// actor of its own (the test's name): tests may share a database.
func newBranchEnv(t *testing.T, db *sqlx.DB) *branchEnv {
	e := &branchEnv{t: t, db: db, store: postgres.New(db), clock: testenv.NewClock(),
		scope: idempotency.Scope{Actor: t.Name(), Operation: "demo-requests.create", Key: "k"}}
	e.store.Clock = e.clock.Now
	r, err := idempotency.NewRunner(idempotency.Config{Store: e.store, TTL: branchTTL, Lease: branchLease})
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	return e
}

// create is a work that files a demo request: a 201 and its business row.
func (e *branchEnv) create(topic string) idempotency.Work {
	return func(_ context.Context, now time.Time) (idempotency.Answer, error) {
		dr := demo.Request{ID: uuid.NewString(), Actor: e.scope.Actor, State: demo.StateAccepted, Topic: topic, CreatedAt: now.UTC().Truncate(time.Microsecond)}
		return idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte(`{"requestId":"` + dr.ID + `"}`), ResultID: dr.ID},
			Effect: e.store.CreateDemoRequest(dr)}, nil
	}
}

func (e *branchEnv) do(p idempotency.Path, fp string, wait time.Duration, work idempotency.Work) (idempotency.Result, error) {
	req := idempotency.Request{Scope: e.scope, Fingerprint: fp, Path: p, Wait: wait, Retry: e.retry}
	return idempotency.NewWaits(nil).Do(context.Background(), req, func(ctx context.Context, req idempotency.Request) (idempotency.Result, error) {
		return e.r.Do(ctx, req, work)
	})
}

// claim holds the key in progress, as another attempt's claim would.
func (e *branchEnv) claim(fp string) idempotency.Claim {
	e.t.Helper()
	c := idempotency.Claim{Scope: e.scope, Token: uuid.NewString()}
	if cr, err := e.store.Claim(context.Background(), idempotency.Claim{Scope: e.scope, Token: c.Token}, fp, branchLease, branchTTL); err != nil || !cr.Wrote {
		e.t.Fatalf("claim: %+v, %v", cr, err)
	}
	return c
}

func (e *branchEnv) rows() int {
	return testenv.Count(e.t, e.db, `SELECT count(*) FROM demo_requests WHERE actor_id = $1`, e.scope.Actor)
}

// firstWrite is the outcome of a request that writes a free key, by path;
// wrote stands for it in a table of both paths.
var firstWrite = map[idempotency.Path]idempotency.Outcome{idempotency.OnePhase: idempotency.OutcomeCompleted, idempotency.TwoPhase: idempotency.OutcomeClaimed}

const wrote idempotency.Outcome = "(the path's first write)"

// TestRunnerBranches runs every branch of the Runner on both paths, as a
// first attempt and as a retry (which reads the key first), against a real
// PostgreSQL: what it answers, the outcome it reports, and the business
// rows it leaves.
func TestRunnerBranches(t *testing.T) {
	tests := []struct {
		name string
		// setup brings the key to the state the request meets.
		setup func(e *branchEnv, p idempotency.Path)
		fp    string
		wait  time.Duration
		// want
		outcome  idempotency.Outcome
		code     string // the error's code, "" for none
		replayed bool
		waited   bool
		rows     int
	}{
		{name: "a first request writes its key and creates",
			setup: func(*branchEnv, idempotency.Path) {}, fp: "fp",
			outcome: wrote, rows: 1},
		{name: "a retry replays",
			setup: func(e *branchEnv, p idempotency.Path) { e.do(p, "fp", 0, e.create("t")) }, fp: "fp",
			outcome: idempotency.OutcomeReplayed, replayed: true, rows: 1},
		{name: "another payload is a mismatch",
			setup: func(e *branchEnv, p idempotency.Path) { e.do(p, "fp", 0, e.create("t")) }, fp: "other",
			outcome: idempotency.OutcomeMismatch, code: apperr.KeyPayloadMismatch, rows: 1},
		{name: "a live claim is in progress",
			setup: func(e *branchEnv, _ idempotency.Path) { e.claim("fp") }, fp: "fp",
			outcome: idempotency.OutcomeInProgress, code: apperr.OperationInProgress, rows: 0},
		{name: "a live claim of another payload is a mismatch",
			setup: func(e *branchEnv, _ idempotency.Path) { e.claim("fp") }, fp: "other",
			outcome: idempotency.OutcomeMismatch, code: apperr.KeyPayloadMismatch, rows: 0},
		{name: "a waiting retry gets the owner's answer",
			setup: func(e *branchEnv, _ idempotency.Path) {
				c := e.claim("fp")
				go func() {
					time.Sleep(200 * time.Millisecond)
					d, _ := e.create("t")(context.Background(), e.clock.Now())
					e.store.FinishClaimAtomically(context.Background(), c, d)
				}()
			}, fp: "fp", wait: 5 * time.Second,
			outcome: idempotency.OutcomeReplayed, replayed: true, waited: true, rows: 1},
		{name: "an expired record is taken over as a new intent",
			setup: func(e *branchEnv, p idempotency.Path) {
				e.do(p, "fp", 0, e.create("t"))
				e.clock.Advance(branchTTL + time.Second)
			},
			fp: "other", outcome: idempotency.OutcomeExpiredTakenOver, rows: 2},
		{name: "a claim past its lease is taken over by the same intent",
			setup: func(e *branchEnv, _ idempotency.Path) { e.claim("fp"); e.clock.Advance(branchLease + time.Second) },
			fp:    "fp", outcome: idempotency.OutcomeLeaseTakenOver, rows: 1},
		{name: "a claim past its lease is not another intent's",
			setup: func(e *branchEnv, _ idempotency.Path) { e.claim("fp"); e.clock.Advance(branchLease + time.Second) },
			fp:    "other", outcome: idempotency.OutcomeMismatch, code: apperr.KeyPayloadMismatch, rows: 0},
	}
	db := pgtest.NewDB(t)
	for _, p := range paths {
		for _, attempt := range []string{"first", "retry"} {
			for _, tc := range tests {
				t.Run(string(p)+"/"+attempt+"/"+tc.name, func(t *testing.T) {
					t.Parallel()
					e := newBranchEnv(t, db)
					tc.setup(e, p)
					e.retry = attempt == "retry"
					res, err := e.do(p, tc.fp, tc.wait, e.create("t"))
					if tc.code == "" && err != nil || tc.code != "" && apperr.Code(err) != tc.code {
						t.Fatalf("Do: %v, want code %q", err, tc.code)
					}
					if tc.outcome == wrote {
						tc.outcome = firstWrite[p]
					}
					if res.Outcome != tc.outcome || res.Replayed != tc.replayed || res.Waited != tc.waited || res.Path != p {
						t.Fatalf("Do = %+v, want outcome %s, replayed %v, waited %v on %s", res, tc.outcome, tc.replayed, tc.waited, p)
					}
					if err == nil && res.Response.Status != 201 {
						t.Fatalf("answer %d, want the create's 201", res.Response.Status)
					}
					if n := e.rows(); n != tc.rows {
						t.Fatalf("%d business rows, want %d", n, tc.rows)
					}
				})
			}
		}
	}
}

// TestRunnerFailures: a work that fails stores nothing on either path, and
// the two-phase claim is released, so the retry runs as a first request; a
// two-phase owner that lost its lease to another attempt creates nothing.
func TestRunnerFailures(t *testing.T) {
	failing := func(context.Context, time.Time) (idempotency.Answer, error) {
		return idempotency.Answer{}, errors.New("the work failed")
	}
	want := map[idempotency.Path]idempotency.Outcome{idempotency.OnePhase: idempotency.OutcomeFailed, idempotency.TwoPhase: idempotency.OutcomeReleased}
	for _, p := range paths {
		t.Run(string(p)+"/a failed work stores nothing", func(t *testing.T) {
			t.Parallel()
			e := newBranchEnv(t, pgtest.NewDB(t))
			res, err := e.do(p, "fp", 0, failing)
			if err == nil || res.Outcome != want[p] {
				t.Fatalf("Do = %+v, %v; want %s and the work's error", res, err, want[p])
			}
			if n := testenv.Count(t, e.db, `SELECT count(*) FROM idempotency_keys`); n != 0 {
				t.Fatalf("%d key rows after a failed work, want 0", n)
			}
			if res, err := e.do(p, "fp", 0, e.create("t")); err != nil || res.Outcome != firstWrite[p] {
				t.Fatalf("the retry: %+v, %v; want a first request", res, err)
			}
		})
	}
	t.Run("two_phase/an owner that lost its lease creates nothing", func(t *testing.T) {
		t.Parallel()
		e := newBranchEnv(t, pgtest.NewDB(t))
		slow := func(ctx context.Context, now time.Time) (idempotency.Answer, error) {
			// While this owner works, its lease passes and another attempt
			// takes the key over.
			e.clock.Advance(branchLease + time.Second)
			e.claim("fp")
			return e.create("t")(ctx, now)
		}
		res, err := e.do(idempotency.TwoPhase, "fp", 0, slow)
		if apperr.Code(err) != apperr.OperationInProgress || res.Outcome != idempotency.OutcomeLeaseLost {
			t.Fatalf("Do = %+v, %v; want lease_lost and 409", res, err)
		}
		if n := e.rows(); n != 0 {
			t.Fatalf("%d business rows from an owner that lost its lease, want 0", n)
		}
	})
}

// countingStore is the real store, counting the statements the Runner runs.
type countingStore struct {
	*postgres.Store
	lookups, writes int
}

func (s *countingStore) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	s.lookups++
	return s.Store.Lookup(ctx, sc)
}

func (s *countingStore) CompleteAtomically(ctx context.Context, c idempotency.Claim, fp string, ttl time.Duration, a idempotency.Answer) (idempotency.KeyWrite, error) {
	s.writes++
	return s.Store.CompleteAtomically(ctx, c, fp, ttl, a)
}

// TestRetryReadsFirst: a retry's replay is one read and no write
// statement; a retry that finds no key falls back to the one-phase
// statement; a first attempt does not read first.
func TestRetryReadsFirst(t *testing.T) {
	t.Parallel()
	e := newBranchEnv(t, pgtest.NewDB(t))
	store := &countingStore{Store: e.store}
	r, err := idempotency.NewRunner(idempotency.Config{Store: store, TTL: branchTTL, Lease: branchLease})
	if err != nil {
		t.Fatal(err)
	}
	do := func(key string, retry bool) idempotency.Result {
		t.Helper()
		sc := e.scope
		sc.Key = key
		res, err := r.Do(context.Background(), idempotency.Request{Scope: sc, Fingerprint: "fp", Path: idempotency.OnePhase, Retry: retry}, e.create("t"))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	steps := []struct {
		name           string
		key            string
		retry          bool
		outcome        idempotency.Outcome
		lookups, write int
	}{
		{"a first attempt writes at once", "k1", false, idempotency.OutcomeCompleted, 0, 1},
		{"its retry reads, and writes nothing", "k1", true, idempotency.OutcomeReplayed, 1, 0},
		{"a retry of a key never seen reads, then writes", "k2", true, idempotency.OutcomeCompleted, 1, 1},
		{"a first attempt of a used key runs the statement, which replays", "k2", false, idempotency.OutcomeReplayed, 0, 1},
	}
	for _, s := range steps {
		store.lookups, store.writes = 0, 0
		if res := do(s.key, s.retry); res.Outcome != s.outcome || store.lookups != s.lookups || store.writes != s.write {
			t.Fatalf("%s: %s with %d reads and %d writes, want %s, %d and %d", s.name, res.Outcome, store.lookups, store.writes, s.outcome, s.lookups, s.write)
		}
	}
}
