package service

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/conformance"
	"github.com/demo-api/demo-api/internal/tools/proctest"
	"github.com/demo-api/demo-api/internal/tools/targetapi"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestConformanceOfDemoAPI runs demo-api conformance against the service
// on a real PostgreSQL, with every check able to run (a second actor, the
// TTL, a way to fail): each passes, and the database holds exactly the
// rows the checks' creates may make.
func TestConformanceOfDemoAPI(t *testing.T) {
	testkit.Long(t, "the conformance suite end to end through the command")
	t.Parallel()
	const otherToken = "tok-e2e-other-7a1f"
	base, db := proctest.ServeInProcess(t, run, "IDEMPOTENCY_TTL=3s", "IDEMPOTENCY_LEASE=3s",
		"API_TOKENS=alice:"+auth.Hash(proctest.Token)+",bob:"+auth.Hash(otherToken))
	const storms, lost = 3, 3
	var out strings.Builder
	err := run(context.Background(), []string{"conformance", "--base", base, "--json",
		"--header", "Authorization: Bearer " + proctest.Token,
		"--other-actor-header", "Authorization: Bearer " + otherToken,
		"--fail-header", "Workshop-Fail: after-claim", "--ttl", "3s",
		"--storm", "16", "--repeat", "3"},
		func(string) string { return "" }, &out, io.Discard)
	if err != nil {
		t.Fatalf("conformance: %v\n%s", err, out.String())
	}
	var rep conformance.Report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("the --json report does not parse: %v\n%s", err, out.String())
	}
	if len(rep.Results) != len(conformance.Names()) {
		t.Fatalf("%d results, want %d:\n%s", len(rep.Results), len(conformance.Names()), out.String())
	}
	var text strings.Builder
	rep.WriteText(&text)
	t.Logf("the report as text:\n%s", text.String())
	for _, res := range rep.Results {
		if res.Verdict != conformance.Pass {
			t.Errorf("%s: %s %s", res.Check, res.Verdict, res.Why)
		}
	}
	// One row per result: first-request, each storm, each lost response,
	// the two actors of scope, expiry's two intents, and the run after the
	// failure. Missing, malformed or doubled keys and a mismatch make none.
	want := 1 + storms + lost + 2 + 2 + 1
	if n := testkit.Count(t, db, `SELECT count(*) FROM demo_requests`); n != want {
		t.Errorf("%d business rows after the suite, want %d", n, want)
	}
}

// TestConformanceExitStatus: the command exits 1 on a FAIL, with the
// failing check's line, and 0 when every check that ran passed.
func TestConformanceExitStatus(t *testing.T) {
	t.Parallel()
	args := func(base string) []string {
		return []string{"conformance", "--base", base, "--route", "POST /things",
			"--body", `{"n":1}`, "--other-body", `{"n":2}`,
			"--header", "Authorization: Bearer alice", "--other-actor-header", "Authorization: Bearer bob",
			"--storm", "4", "--repeat", "1"}
	}
	global := httptest.NewServer(targetapi.New(targetapi.GlobalKeys, time.Hour))
	defer global.Close()
	var out strings.Builder
	err := run(context.Background(), args(global.URL), func(string) string { return "" }, &out, io.Discard)
	if e, ok := errors.AsType[*ExitError](err); !ok || e.Code != exitCheckFailed || !strings.Contains(out.String(), "FAIL  scope") {
		t.Fatalf("against a server with global keys: %v, want exit %d and scope FAIL:\n%s", err, exitCheckFailed, out.String())
	}
	correct := httptest.NewServer(targetapi.New(targetapi.None, time.Hour))
	defer correct.Close()
	out.Reset()
	if err := run(context.Background(), args(correct.URL), func(string) string { return "" }, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "checks: 9 PASS, 2 SKIP") {
		t.Fatalf("against a correct server: %v\n%s", err, out.String())
	}
}
