//go:build citus

package postgres_test

import (
	"context"
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
// holds the actor's shard, no subplan. A key write runs there as the call
// of its function (migrations/citus/key_writes.sql), which Citus delegates
// to that worker; the reads and the release are statements that route.
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
	statements := []struct {
		file string
		call bool // a key write: its function's call
		args []any
	}{
		{"claim.sql", true, cat([]any{nil}, scope, []any{fp, token, int64(30e6), int64(86400e6)})},
		{"create_demo_request.sql", true, cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), id, "accepted", "topic", "note", now})},
		{"finish_claim_create_demo_request.sql", true, cat([]any{nil}, answer, scope, []any{token, id, "accepted", "topic", "note", now})},
		{"release_claim.sql", false, cat(scope, []any{token})},
		{"lookup_key.sql", false, cat([]any{nil}, scope)},
		{"cancel_demo_request.sql", true, cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), "cancelled", now, id})},
		{"finish_claim_cancel_demo_request.sql", true, cat([]any{nil}, answer, scope, []any{token, "cancelled", now, id})},
		{"get_demo_request.sql", false, []any{id, actor}},
		{"outbox_delivery.sql", false, []any{id, actor}},
	}
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	nodes := regexp.MustCompile(`Node: host=\S+ port=(\d+)`)
	var coordinator string
	if err := db.Get(&coordinator, `SELECT current_setting('port')`); err != nil {
		t.Fatal(err)
	}
	for _, st := range statements {
		query := readSQL(t, st.file)
		if st.call {
			query = postgres.CitusCall(st.file)
		}
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
		if st.call && !strings.Contains(plan, "Function Scan on "+strings.TrimSuffix(st.file, ".sql")) {
			t.Errorf("%s: the call is not delegated to the worker:\n%s", st.file, plan)
		}
	}
}
