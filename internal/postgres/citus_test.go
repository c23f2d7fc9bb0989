//go:build citus

package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestCitusExplain (make test-citus) explains what the store runs for each
// step of a request's path on the cluster, with the arguments it passes,
// and checks that each is a router query: one task, on the worker that
// holds the actor's shard, no subplan. A key write is the call of a
// function that returns key_write (write_key, or an operation's), which
// Citus delegates to that worker; the reads and the release are statements
// that route.
func TestCitusExplain(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	// A plain connection, parameters sent as text: EXPLAIN takes the
	// statement's parameters from Bind.
	db, err := sqlx.Open("postgres", pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC()
	id, token := uuid.NewString(), uuid.NewString()
	const actor, op, key, fp = "alice", "demo-requests.create", "k-explain", "fp"
	answer := []any{201, []byte(`{}`), `{}`, id}
	scope := []any{actor, op, key}
	cat := func(parts ...[]any) []any {
		var all []any
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	keyArgs := func(finish bool) []any {
		return cat([]any{nil}, scope, []any{token, finish, fp, int64(86400e6)}, answer)
	}
	statements := []struct {
		file string
		call string // a key write: the function whose call Citus delegates
		args []any
	}{
		{"claim.sql", "write_key", cat([]any{nil}, scope, []any{token, fp, int64(30e6), int64(86400e6)})},
		{"create_demo_request.sql", "create_demo_request", cat(keyArgs(false), []any{id, "accepted", "topic", "note", now})},
		{"create_demo_request.sql", "create_demo_request", cat(keyArgs(true), []any{id, "accepted", "topic", "note", now})},
		{"release_claim.sql", "", cat(scope, []any{token})},
		{"lookup_key.sql", "", cat([]any{nil}, scope)},
		{"cancel_demo_request.sql", "cancel_demo_request", cat(keyArgs(false), []any{"cancelled", now, id})},
		{"answer_only.sql", "write_key", keyArgs(false)},
		{"get_demo_request.sql", "", []any{id, actor}},
		{"outbox_delivery.sql", "", []any{id, actor}},
	}
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	nodes := regexp.MustCompile(`Node: host=\S+ port=(\d+)`)
	var coordinator string
	if err := db.Get(&coordinator, `SELECT current_setting('port')`); err != nil {
		t.Fatal(err)
	}
	for _, st := range statements {
		query := readSQL(t, st.file)
		var lines []string
		if err := db.SelectContext(context.Background(), &lines, "EXPLAIN (COSTS OFF) "+query, st.args...); err != nil {
			t.Errorf("%s: %v", st.file, err)
			continue
		}
		plan := strings.Join(lines, "\n")
		counts := tasks.FindAllStringSubmatch(plan, -1)
		subplans := strings.Count(plan, "Distributed Subplan")
		workers := map[string]bool{}
		for _, m := range nodes.FindAllStringSubmatch(plan, -1) {
			if m[1] != coordinator {
				workers[m[1]] = true
			}
		}
		t.Logf("%s: %d tasks, %d subplans, on workers %v", st.file, len(counts), subplans, workers)
		if len(counts) != 1 || counts[0][1] != "1" || subplans != 0 || len(workers) != 1 {
			t.Errorf("%s: %d scans, %d subplans, on workers %v; want one task on one worker:\n%s", st.file, len(counts), subplans, workers, plan)
		}
		if st.call != "" && !strings.Contains(plan, "Function Scan on "+st.call) {
			t.Errorf("%s: the call is not delegated to the worker:\n%s", st.file, plan)
		}
	}
}

// TestCitusScans (make test-citus): the dispatcher's take, its marks and
// the sweeper reach every shard, one after another. Forty actors' requests
// spread over the shards: one take of a batch larger than all of them
// takes each once, their marks record every one, and a second take finds
// none; a sweep in batches of three, mark after mark, deletes every
// expired key. Each scan's call is one task, on one worker.
func TestCitusScans(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := postgres.New(db)
	clk := testenv.NewClock()
	s.Clock = clk.Now
	var shards, holding int
	if err := db.Get(&shards, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'outbox'::regclass`); err != nil {
		t.Fatal(err)
	}
	if err := db.Get(&holding, `SELECT count(DISTINCT get_shard_id_for_distribution_column('outbox', 'actor-' || g))
		FROM generate_series(0, 39) g`); err != nil || holding != shards {
		t.Fatalf("the actors' rows are on %d of the %d shards (%v): want all", holding, shards, err)
	}
	const n = 40
	for i := range n {
		r := demo.Request{ID: uuid.NewString(), Actor: fmt.Sprintf("actor-%d", i), State: demo.StateAccepted, Topic: "t", CreatedAt: clk.Now()}
		d := idempotency.Answer{Response: idempotency.Response{Status: 201, Body: []byte("{}"), ResultID: r.ID}, Effect: s.CreateDemoRequest(r)}
		sc := idempotency.Scope{Actor: r.Actor, Operation: "demo-requests.create", Key: r.ID}
		if _, err := s.CompleteAtomically(ctx, idempotency.Claim{Scope: sc, Token: uuid.NewString()}, "fp", time.Hour, d); err != nil {
			t.Fatal(err)
		}
	}

	token := uuid.NewString()
	due, err := s.TakeDue(ctx, token, 100, time.Minute, nil)
	taken := map[string]bool{}
	for _, d := range due {
		taken[d.RequestID] = true
	}
	if err != nil || len(due) != n || len(taken) != n {
		t.Fatalf("one take of 100: %d rows, %d requests, %v; want each of the %d once", len(due), len(taken), err, n)
	}
	marks := make([]delivery.Mark, len(due))
	for i, d := range due {
		marks[i] = delivery.Mark{RequestID: d.RequestID, Actor: d.Actor, Kind: d.Kind, Seq: d.Seq, Token: token,
			State: delivery.Submitted, Reference: "ref-" + d.RequestID}
	}
	if settled, err := s.Settle(ctx, marks); err != nil || settled != n {
		t.Fatalf("the marks recorded %d rows, %v; want %d", settled, err, n)
	}
	if due, err := s.TakeDue(ctx, uuid.NewString(), 100, time.Minute, nil); err != nil || len(due) != 0 {
		t.Fatalf("a take after the marks: %d rows, %v; want none", len(due), err)
	}

	clk.Advance(2 * time.Hour)
	var deleted int64
	batches := 0
	for mark := (postgres.SweepMark{}); ; batches++ {
		d, next, err := s.PurgeExpired(ctx, 3, mark)
		if err != nil {
			t.Fatal(err)
		}
		deleted += d
		if next == nil {
			break
		}
		mark = *next
	}
	if left := testenv.Count(t, db, `SELECT count(*) FROM idempotency_keys`); deleted != n || left != 0 {
		t.Fatalf("the sweep deleted %d keys in %d batches, %d left; want all %d", deleted, batches+1, left, n)
	}
	t.Logf("%d shards: one take of %d, one settle, a sweep in %d batches of 3", shards, n, batches+1)

	// What EXPLAIN shows of a scan's call: delegated to one worker.
	var plan []string
	if err := db.Select(&plan, "EXPLAIN (COSTS OFF) "+postgres.ScanCall("outbox_take_due.sql"),
		"actor-0", readSQL(t, "outbox_take_due.sql"), nil, "{}", 10, uuid.NewString(), int64(1e6)); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "Task Count: 1") || !strings.Contains(p, "Function Scan on outbox_take_due") {
		t.Errorf("the take's call is not delegated to one worker:\n%s", p)
	}
}
