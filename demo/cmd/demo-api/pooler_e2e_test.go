package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestBehindPgBouncer runs serve, dispatch and the review desk through a
// real PgBouncer in transaction mode, configured as production runs it (no
// ignore_startup_parameters), and walks the contract's core branches
// through it: a claim, its replay, a retry while the first runs (409), a
// changed payload (422), a cancel (a transaction of two statements), a
// burst of creates and retries on shared keys (every server connection
// serves many clients' transactions), and the outbox handed to the desk by
// demo-api dispatch. Migrations need a direct connection: through the
// pooler, migrate says so.
func TestBehindPgBouncer(t *testing.T) {
	testenv.Long(t, "runs behind PgBouncer")
	bouncer := pgtest.NewPgBouncer(t, "")
	direct := pgtest.NewURL(t)
	deskDirect := pgtest.NewURL(t)
	deskDB := sqlx.MustOpen("postgres", deskDirect)
	defer deskDB.Close()
	if err := provider.Migrate(deskDB); err != nil { // the desk's schema, over the direct URL
		t.Fatal(err)
	}
	deskAddr, _, _ := runProvider(t, map[string]string{
		"PROVIDER_DATABASE_URL": bouncer.URL(deskDirect), "PROVIDER_LISTEN_ADDR": "127.0.0.1:0"})
	pooled := bouncer.URL(direct)
	p := testenv.Start(t, pooled, "PROVIDER_URL=http://"+deskAddr, "DISPATCH=false")
	db := sqlx.MustOpen("postgres", direct)
	defer db.Close()
	if !testenv.Eventually(5*time.Second, func() bool { return strings.Contains(p.Log(), `"unprepared":true`) }) {
		t.Fatalf("serve did not recognise the pooler (its log has no \"unprepared\":true):\n%s", p.Log())
	}

	const body = `{"topic":"topic-e2e","note":"note-e2e"}`
	post := func(key, body string, header ...string) (*http.Response, string) {
		t.Helper()
		resp, b, err := testenv.PostCreate(context.Background(), p.URL, testenv.TokenAlice, key, body, header...)
		if err != nil {
			t.Fatalf("POST key %s: %v", key, err)
		}
		return resp, string(b)
	}

	// A claim, and its replay.
	resp, first := post("key-pool-1", body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create through the pooler: %d %s", resp.StatusCode, first)
	}
	resp, again := post("key-pool-1", body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || again != first {
		t.Fatalf("replay through the pooler: %d replayed=%q\n%s\nwant the first answer\n%s",
			resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), again, first)
	}

	// A changed payload under the same key.
	resp, b := post("key-pool-1", `{"topic":"another","note":"note-e2e"}`)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(b, "key_payload_mismatch") {
		t.Fatalf("changed payload through the pooler: %d %s, want 422 key_payload_mismatch", resp.StatusCode, b)
	}

	// A retry while the first attempt still works.
	done := make(chan int, 1)
	go func() {
		resp, _, err := testenv.PostCreate(context.Background(), p.URL, testenv.TokenAlice, "key-pool-2", body, "Workshop-Delay", "1500ms")
		if err != nil {
			done <- 0
			return
		}
		done <- resp.StatusCode
	}()
	p.WaitInProgress(t, "key-pool-2")
	resp, b = post("key-pool-2", body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(b, "operation_in_progress") {
		t.Fatalf("retry in progress through the pooler: %d %s, want 409 operation_in_progress", resp.StatusCode, b)
	}
	if status := <-done; status != http.StatusCreated {
		t.Fatalf("the delayed first attempt: %d, want 201", status)
	}

	// A cancel: a read, then the write and its key in one transaction.
	var created struct {
		RequestID string `json:"requestId"`
	}
	if err := json.Unmarshal([]byte(first), &created); err != nil || created.RequestID == "" {
		t.Fatalf("the create's answer has no requestId: %v\n%s", err, first)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		resp, cb, err := testenv.Send(context.Background(), http.MethodPost, p.URL+"/v1/demo-requests/"+created.RequestID+"/cancel",
			testenv.TokenAlice, "key-pool-cancel", "")
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(cb), `"state":"cancelled"`) {
			t.Fatalf("cancel attempt %d through the pooler: %v %v %s", attempt, err, resp, cb)
		}
	}

	// A burst: 20 keys, each sent by two clients at once, more clients than
	// PgBouncer has server connections.
	var wg sync.WaitGroup
	statuses := make(chan string, 40)
	for i := range 20 {
		for range 2 {
			wg.Go(func() {
				resp, b, err := testenv.PostCreate(context.Background(), p.URL, testenv.TokenAlice, fmt.Sprintf("key-burst-%d", i), body)
				switch {
				case err != nil:
					statuses <- err.Error()
				case resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict:
					statuses <- fmt.Sprintf("%d %s", resp.StatusCode, b)
				}
			})
		}
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		t.Errorf("a create of the burst: %s", s)
	}
	if n := testenv.Count(t, db, `SELECT count(*) FROM demo_requests WHERE topic = 'topic-e2e'`); n != 22 {
		t.Fatalf("%d business rows, want 22 (one per key)", n)
	}

	// The outbox, handed over by demo-api dispatch through the pooler.
	testenv.StartDispatch(t, pooled, "PROVIDER_URL=http://"+deskAddr)
	if !testenv.Eventually(20*time.Second, func() bool {
		return testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE kind = 'submit' AND state = 'submitted'`) == 21
	}) {
		t.Fatalf("deliveries: %d submitted, want the 21 not cancelled before they were sent",
			testenv.Count(t, db, `SELECT count(*) FROM outbox WHERE kind = 'submit' AND state = 'submitted'`))
	}
	if n := testenv.Count(t, deskDB, `SELECT count(*) FROM submissions`); n != 21 {
		t.Fatalf("the desk holds %d submissions, want 21", n)
	}
	if log := p.Log(); strings.Contains(log, "prepared statement") || strings.Contains(log, "unsupported startup parameter") {
		t.Fatalf("serve's log shows a session the pooler does not keep:\n%s", log)
	}

	// Migrations need a session of their own: through the pooler, a schema
	// that is current is left alone, one that is not is refused, saying
	// what to do.
	var out strings.Builder
	env := func(k string) string { return map[string]string{"DATABASE_URL": pooled}[k] }
	if err := run(context.Background(), []string{"migrate", "up"}, env, &out, &out); err != nil {
		t.Fatalf("migrate up through the pooler on a current schema: %v", err)
	}
	directDB, err := postgres.Open(context.Background(), direct, postgres.LongStatements)
	if err != nil {
		t.Fatal(err)
	}
	defer directDB.Close()
	if err := postgres.MigrateFS(directDB, migrations.FS, ".", migrations.Table, -1); err != nil { // the demo's last down
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"migrate", "up"}, env, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "direct") {
		t.Fatalf("migrate up through the pooler on a schema behind: %v, want an error that asks for a direct URL", err)
	}
	t.Logf("migrate through the pooler: %v", err)
	if err := run(context.Background(), []string{"migrate", "up"}, func(k string) string {
		return map[string]string{"DATABASE_URL": direct}[k]
	}, &out, &out); err != nil {
		t.Fatalf("migrate up over the direct URL: %v", err)
	}
}
