package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

// TestBaselineServer runs the baseline server on a migrated database: it
// authenticates, decodes and validates as the API does (with its code), answers a create with a 201 that
// has the API's headers and body members, inserts one row, logs one line
// per request, and stops when its context ends. With BASELINE_OUTBOX=true
// each request also writes its outbox row; with BASELINE_KEY=true, and
// first its key row, completed with the answer it sent.
func TestBaselineServer(t *testing.T) {
	for _, mode := range []string{"plain", "outbox", "key"} {
		t.Run(mode, func(t *testing.T) { testBaselineServer(t, mode) })
	}
}

func testBaselineServer(t *testing.T, mode string) {
	outbox, keyed := mode != "plain", mode == "key"
	dbURL := pgtest.NewURL(t)
	const token = "tok-baseline"
	env := map[string]string{
		"DATABASE_URL":    dbURL,
		"LISTEN_ADDR":     "127.0.0.1:0",
		"API_TOKENS":      "bench:" + auth.Hash(token),
		"BASELINE_OUTBOX": fmt.Sprint(outbox),
		"BASELINE_KEY":    fmt.Sprint(keyed),
	}
	logPath := filepath.Join(t.TempDir(), "baseline.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- serveBaseline(ctx, func(k string) string { return env[k] }, stdoutW, logFile)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "baseline listening on ")
	if !ok {
		t.Fatalf("first line %q (%v), want the address; server: %v", line, err, <-served)
	}
	go io.Copy(io.Discard, stdoutR)

	post := func(token, contentType, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/demo-requests", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
		}
		return resp, m
	}
	const jsonType = "application/json"
	for _, tc := range []struct {
		token, contentType, body string
		status                   int
		code                     string
	}{
		{"", jsonType, `{"topic":"x"}`, http.StatusUnauthorized, "unauthorized"},
		{"wrong", jsonType, `{"topic":"x"}`, http.StatusUnauthorized, "unauthorized"},
		{token, jsonType, `{"topic":""}`, http.StatusBadRequest, "invalid_field"},
		{token, jsonType, `{"topic":"x","extra":1}`, http.StatusBadRequest, "unknown_field"},
		// Only the API's decoder refuses a member sent twice: the baseline decodes with it.
		{token, jsonType, `{"topic":"x","topic":"y"}`, http.StatusBadRequest, "invalid_field"},
		{token, jsonType, `{"topic":"x"} {}`, http.StatusBadRequest, "malformed_json"},
		{token, "text/plain", `{"topic":"x"}`, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	} {
		if resp, m := post(tc.token, tc.contentType, tc.body); resp.StatusCode != tc.status || m["code"] != tc.code {
			t.Errorf("%q with token %q: status %d %v, want %d %s", tc.body, tc.token, resp.StatusCode, m, tc.status, tc.code)
		}
	}

	resp, m := post(token, jsonType, `{"topic":"billing","note":"call me","clientLabel":"try 1"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: status %d %v", resp.StatusCode, m)
	}
	id, _ := m["requestId"].(string)
	if got := resp.Header.Get("Location"); id == "" || got != "/v1/demo-requests/"+id {
		t.Errorf("Location %q for request %q", got, id)
	}
	if got := resp.Header.Get("Content-Type"); got != jsonType {
		t.Errorf("Content-Type %q", got)
	}
	// The members of demo.Request's JSON, as the API answers a create.
	if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, []string{"createdAt", "note", "requestId", "state", "topic"}) {
		t.Errorf("body members %v", got)
	}
	if m["state"] != "accepted" || m["topic"] != "billing" || m["note"] != "call me" {
		t.Errorf("body %v", m)
	}

	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows int
	if err := db.Get(&rows, `SELECT count(*) FROM demo_requests WHERE id = $1 AND actor_id = 'bench' AND topic = 'billing'`, id); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d rows for request %s, want 1", rows, id)
	}
	var outboxRows int
	if err := db.Get(&outboxRows, `SELECT count(*) FROM outbox WHERE request_id = $1 AND state = 'pending'`, id); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{false: 0, true: 1}[outbox]; outboxRows != want {
		t.Errorf("%d outbox rows for request %s, want %d", outboxRows, id, want)
	}
	var keys []struct {
		Key    string `db:"idem_key"`
		State  string `db:"state"`
		Status int    `db:"status_code"`
		Body   []byte `db:"response_body"`
	}
	if err := db.Select(&keys, `SELECT idem_key, state, status_code, response_body FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	switch {
	case !keyed && len(keys) != 0:
		t.Errorf("key rows %+v, want none", keys)
	case keyed && len(keys) != 1:
		t.Errorf("%d key rows, want the request's one", len(keys))
	case keyed:
		var answer map[string]any
		if k := keys[0]; k.Key != id || k.State != "completed" || k.Status != http.StatusCreated || json.Unmarshal(k.Body, &answer) != nil || answer["requestId"] != id {
			t.Errorf("key row %s %s %d %q, want request %s completed with its 201", k.Key, k.State, k.Status, k.Body, id)
		}
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serveBaseline after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serveBaseline did not stop after its context ended")
	}
	logs, _ := os.ReadFile(logPath)
	var created int
	for l := range strings.Lines(string(logs)) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line not JSON: %q", l)
		}
		if rec["msg"] == "request" && rec["route"] == "/v1/demo-requests" && rec["status"] == float64(201) && rec["actor"] == "bench" {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d request lines for the 201, want 1; log:\n%s", created, logs)
	}
	if strings.Contains(string(logs), token) || strings.Contains(string(logs), "call me") {
		t.Errorf("the baseline server logged a token or a body:\n%s", logs)
	}
}
