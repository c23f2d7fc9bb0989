//go:build citus

package postgres_test

import (
	"context"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
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

// TestCitusScanIsDelegated (make test-citus): a scan's call on a shard
// (here the take's) is one task, delegated to the worker of that shard.
func TestCitusScanIsDelegated(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	db := pgtest.NewDB(t)
	call, err := fs.ReadFile(postgres.CitusFiles, "citus/outbox_take_due_on_shard.sql")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	if err := db.Select(&plan, "EXPLAIN (COSTS OFF) "+string(call), "actor-0", nil, "{}", 10, uuid.NewString(), int64(1e6)); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "Task Count: 1") || !strings.Contains(p, "Function Scan on outbox_take_due_on_shard") {
		t.Errorf("the take's call is not delegated to one worker:\n%s", p)
	}
}

// TestCitusScansAfterASplit (make test-citus): a shard split under a
// running store needs no restart. The store reads the shards (a sweep of
// nothing), then the shard of actor-0 is split in two on its worker
// (citus_split_shard_by_split_points): the next scans find nine shards,
// and take, mark and sweep every actor's rows once, the split shard's too.
func TestCitusScansAfterASplit(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := postgres.NewCitus(db)
	if _, _, err := s.PurgeExpired(ctx, 10, postgres.SweepMark{}); err != nil {
		t.Fatal(err)
	}
	var before, after int
	if err := db.Get(&before, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'idempotency_keys'::regclass`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`SELECT citus_split_shard_by_split_points(s.shardid,
			ARRAY[((s.shardminvalue::bigint + s.shardmaxvalue::bigint) / 2)::text],
			ARRAY[n.nodeid, n.nodeid], 'block_writes')
		FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid)
		WHERE s.shardid = get_shard_id_for_distribution_column('idempotency_keys', 'actor-0')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Get(&after, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'idempotency_keys'::regclass`); err != nil || after != before+1 {
		t.Fatalf("%d shards after the split, %d before (%v): want one more", after, before, err)
	}
	takeSettleAndSweep(t, s, db, 40)
	t.Logf("%d shards, then %d after a split: every row taken, marked and swept once", before, after)
}

// TestCitusKeyWritesKeepAWorkerSessionsMemory (make test-citus): a session
// that replays a key again and again keeps the memory of its backend on the
// worker. The coordinator keeps its connection to the worker, so every call
// of one session runs in the same worker backend; a probe delegated with
// the key writes reads that backend's memory before and after 500 replays.
// With generic plans Citus 14 keeps a local plan per execution of each
// statement of a delegated function (tens of kB a call) until the session
// ends; Distribute gives the key writes custom plans.
func TestCitusKeyWritesKeepAWorkerSessionsMemory(t *testing.T) {
	if !pgtest.Citus() {
		t.Fatal("needs TEST_DATABASE_URL to name a Citus coordinator (make test-citus)")
	}
	ctx := context.Background()
	db := pgtest.NewDB(t)
	for _, q := range []string{
		`CREATE FUNCTION worker_memory(actor text, OUT pid integer, OUT bytes bigint) LANGUAGE sql AS $$
		    SELECT pg_backend_pid(), sum(total_bytes)::bigint FROM pg_backend_memory_contexts $$`,
		`SELECT create_distributed_function('worker_memory(text)', '$1', colocate_with => 'idempotency_keys')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := db.Connx(ctx) // one session
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	create := readSQL(t, "create_demo_request.sql")
	id := uuid.NewString()
	args := []any{nil, "alice", "demo-requests.create", "k-memory", uuid.NewString(), false, "fp", int64(86400e6),
		201, []byte(`{}`), `{}`, id, id, "accepted", "topic", "note", time.Now().UTC()}
	replay := func(n int) {
		for range n {
			if _, err := conn.ExecContext(ctx, create, args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	type probe struct {
		PID   int   `db:"pid"`
		Bytes int64 `db:"bytes"`
	}
	var before, after probe
	replay(50) // the first a create, then replays; the session's plans made
	if err := conn.GetContext(ctx, &before, `SELECT * FROM worker_memory('alice')`); err != nil {
		t.Fatal(err)
	}
	replay(500)
	if err := conn.GetContext(ctx, &after, `SELECT * FROM worker_memory('alice')`); err != nil {
		t.Fatal(err)
	}
	if before.PID != after.PID {
		t.Fatalf("the probes ran in worker backends %d and %d: the session's calls do not share one", before.PID, after.PID)
	}
	if grew := after.Bytes - before.Bytes; grew > 2<<20 {
		t.Errorf("the worker backend of one session grew by %d kB in 500 replays (%d B a replay)", grew>>10, grew/500)
	}
}
