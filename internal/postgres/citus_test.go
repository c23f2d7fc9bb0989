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

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// TestCitusExplain (make test-citus) explains each statement of a request's
// path on the cluster, with the arguments the store passes, and checks
// that every part of it goes to the actor's shard alone: each distributed
// scan one task, all on one worker. The reads and the release are router
// queries (one task, nothing else); a statement that inserts in a CTE is
// not, in Citus 14 (such an INSERT is always a subplan of its own): its
// subplans are counted and logged, docs/capacity.md gives their cost.
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
		file   string
		router bool
		args   []any
	}{
		{"claim.sql", false, cat([]any{nil}, scope, []any{fp, token, int64(30e6), int64(86400e6)})},
		{"create_demo_request.sql", false, cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), id, "accepted", "topic", "note", now})},
		{"finish_claim_create_demo_request.sql", false, cat([]any{nil}, answer, scope, []any{token, id, "accepted", "topic", "note", now})},
		{"release_claim.sql", true, cat(scope, []any{token})},
		{"lookup_key.sql", true, cat([]any{nil}, scope)},
		{"cancel_demo_request.sql", false, cat([]any{nil}, scope, []any{fp, token}, answer,
			[]any{int64(86400e6), "cancelled", now, id})},
		{"finish_claim_cancel_demo_request.sql", false, cat([]any{nil}, answer, scope, []any{token, "cancelled", now, id})},
		{"get_demo_request.sql", true, []any{id, actor}},
		{"outbox_delivery.sql", true, []any{id, actor}},
	}
	tasks := regexp.MustCompile(`Task Count: (\d+)`)
	nodes := regexp.MustCompile(`Node: host=\S+ port=(\d+)`)
	var coordinator string
	if err := db.Get(&coordinator, `SELECT current_setting('port')`); err != nil {
		t.Fatal(err)
	}
	for _, st := range statements {
		var lines []string
		if err := db.SelectContext(context.Background(), &lines, "EXPLAIN (COSTS OFF) "+readSQL(t, st.file), st.args...); err != nil {
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
		t.Logf("%s: %d distributed scans, %d subplans, on workers %v", st.file, len(counts), subplans, workers)
		for _, c := range counts {
			if c[1] != "1" {
				t.Errorf("%s has a scan of %s tasks, want 1 (the actor's shard):\n%s", st.file, c[1], plan)
			}
		}
		if len(workers) != 1 || (st.router && (len(counts) != 1 || subplans != 0)) {
			t.Errorf("%s: on workers %v, %d scans, %d subplans: want one worker%s:\n%s", st.file, workers, len(counts), subplans,
				map[bool]string{true: ", one router task"}[st.router], plan)
		}
	}
}
