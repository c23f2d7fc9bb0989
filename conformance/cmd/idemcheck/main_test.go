package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/conformance"
	"github.com/demo-api/demo-api/conformance/internal/target"
)

// graded is what a run must end with under one profile: the exit code, and
// the verdict of each check that is not PASS (or not the SKIP every run of
// its kind has).
type graded struct {
	exit     int
	verdicts map[string]conformance.Verdict
}

type V = map[string]conformance.Verdict

const (
	pass   = conformance.Pass
	fail   = conformance.Fail
	warn   = conformance.Warn
	info   = conformance.Info
	unseen = conformance.Inconclusive
	skip   = conformance.Skip
)

// TestEachFlawGetsItsVerdict runs the command against the test server,
// correct and broken in each way a real implementation went wrong, under
// both profiles, and asserts every check's verdict and the exit code.
func TestEachFlawGetsItsVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: every flaw under both profiles takes a minute of storms, hang-ups and retries")
	}
	needShell(t)
	t.Parallel()
	cases := []struct {
		name          string
		flaw          target.Flaw
		stateChange   bool // POST /things/{id}/reopen after a create and a close
		noCount       bool // no --count-cmd: results are the ids the answers name
		racy          bool // the retry may reach the target before the lost request: run until it did not
		args          []string
		draft, strict graded
	}{
		{name: "correct", flaw: target.Correct},
		{name: "correct, no count", flaw: target.Correct, noCount: true,
			draft:  graded{0, V{"lost-response": unseen}},
			strict: graded{0, V{"lost-response": unseen}}},
		{name: "duplicates in a storm", flaw: target.StormDuplicates,
			draft:  graded{1, V{"storm": fail, "lost-response": fail}},
			strict: graded{1, V{"storm": fail, "lost-response": fail}}},
		{name: "duplicates after a hang-up after the commit", flaw: target.CommitThenRelease,
			draft:  graded{1, V{"lost-response": fail}},
			strict: graded{1, V{"lost-response": fail}}},
		{name: "stuck keys after a hang-up", flaw: target.DiesWithClient,
			draft:  graded{0, V{"lost-response": warn}},
			strict: graded{1, V{"lost-response": fail}}},
		{name: "keys not per actor, with a leak", flaw: target.GlobalLeak,
			draft:  graded{1, V{"scope": fail}},
			strict: graded{1, V{"scope": fail}}},
		{name: "global keys, refused without a leak", flaw: target.GlobalRefuse,
			draft:  graded{0, V{"scope": info}},
			strict: graded{1, V{"scope": fail}}},
		{name: "no id, every request runs", flaw: target.NoID,
			draft:  graded{1, V{"key-missing": warn, "key-malformed": warn, "key-twice": warn, "replay": fail, "mismatch": fail, "storm": fail, "lost-response": fail, "scope": fail, "failure-not-stored": skip}},
			strict: graded{1, V{"key-missing": fail, "key-malformed": fail, "key-twice": fail, "replay": fail, "mismatch": fail, "storm": fail, "lost-response": fail, "scope": fail, "failure-not-stored": skip}}},
		{name: "no id, no count", flaw: target.NoID, noCount: true,
			draft:  graded{0, V{"key-missing": warn, "key-malformed": warn, "key-twice": warn, "replay": unseen, "mismatch": unseen, "storm": unseen, "lost-response": unseen, "scope": unseen, "failure-not-stored": skip}},
			strict: graded{1, V{"key-missing": fail, "key-malformed": fail, "key-twice": fail, "replay": unseen, "mismatch": fail, "storm": unseen, "lost-response": unseen, "scope": unseen, "failure-not-stored": skip}}},
		{name: "a stored 5xx", flaw: target.StoresFailures,
			draft:  graded{0, V{"failure-not-stored": info}},
			strict: graded{1, V{"failure-not-stored": fail}}},
		{name: "a stored 5xx, declared", flaw: target.StoresFailures, args: []string{"--failures-stored"},
			draft:  graded{0, nil},
			strict: graded{2, nil}},
		{name: "a re-rendered replay", flaw: target.Rerender,
			draft:  graded{0, V{"replay": info}},
			strict: graded{1, V{"replay": fail}}},
		{name: "a re-rendered replay, replay by bytes declared", flaw: target.Rerender, args: []string{"--replay", "bytes"},
			draft:  graded{0, V{"replay": warn}},
			strict: graded{1, V{"replay": fail}}},
		{name: "no fingerprint", flaw: target.NoFingerprint,
			draft:  graded{0, V{"mismatch": info}},
			strict: graded{1, V{"mismatch": fail}}},
		{name: "mismatch answered 409", flaw: target.MismatchAs409,
			draft:  graded{0, V{"mismatch": warn}},
			strict: graded{1, V{"mismatch": fail}}},
		{name: "a long Retry-After", flaw: target.LongRetryAfter, args: []string{"--repeat", "3"}},
		{name: "a Retry-After past --settle", flaw: target.LongRetryAfter, racy: true, args: []string{"--repeat", "1", "--settle", "1500ms", "--only", "lost-response"},
			draft:  graded{0, V{"lost-response": unseen}},
			strict: graded{0, V{"lost-response": unseen}}},
		{name: "a 409 without Retry-After", flaw: target.NoRetryAfter,
			draft:  graded{0, V{"storm": info}},
			strict: graded{1, V{"storm": fail}}},
		{name: "an optional key", flaw: target.KeyOptional,
			draft:  graded{0, V{"key-missing": warn}},
			strict: graded{1, V{"key-missing": fail}}},
		{name: "an optional key, declared", flaw: target.KeyOptional, args: []string{"--key-optional"},
			draft:  graded{0, nil},
			strict: graded{2, nil}},
		{name: "opaque keys, the first of two taken", flaw: target.AnyKey,
			draft:  graded{0, V{"key-malformed": warn, "key-twice": warn}},
			strict: graded{1, V{"key-malformed": fail, "key-twice": fail}}},
		{name: "HTML", flaw: target.HTML, draft: graded{3, nil}, strict: graded{3, nil}},
		{name: "a hanging target", flaw: target.Hang, args: []string{"--timeout", "1s"}, draft: graded{3, nil}, strict: graded{3, nil}},
		{name: "a wrong token", flaw: target.Correct, args: []string{"--header", "Authorization: Bearer carol"}, draft: graded{3, nil}, strict: graded{3, nil}},

		{name: "state change, correct", flaw: target.Correct, stateChange: true},
		{name: "state change, duplicates in a storm", flaw: target.StormDuplicates, stateChange: true,
			draft:  graded{0, V{"storm": warn, "lost-response": warn}},
			strict: graded{1, V{"storm": fail, "lost-response": fail}}},
		{name: "state change, duplicates after a hang-up", flaw: target.CommitThenRelease, stateChange: true,
			draft:  graded{0, V{"lost-response": warn}},
			strict: graded{1, V{"lost-response": fail}}},
		{name: "state change, keys not per actor", flaw: target.GlobalLeak, stateChange: true,
			draft:  graded{0, V{"scope": info}},
			strict: graded{1, V{"scope": fail}}},
	}
	for _, tc := range cases {
		for _, profile := range []string{"draft", "strict"} {
			want := tc.draft
			if profile == "strict" {
				want = tc.strict
			}
			t.Run(tc.name+"/"+profile, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				srv := httptest.NewServer(target.New(tc.flaw, time.Minute, dir))
				defer srv.Close()
				args := []string{"--base", srv.URL, "--json", "--profile", profile,
					"--header", "Authorization: Bearer alice", "--other-actor-header", "Authorization: Bearer bob",
					"--fail-header", "Target-Fail: true", "--storm", "8", "--repeat", "5", "--settle", "3s", "--timeout", "5s"}
				skips := []string{"refusal-replayed", "expiry"}
				if tc.stateChange {
					args = append(args, "--route", "POST /things/{id}/reopen",
						"--setup", `POST /things {"ref":"{{nonce}}"}`, "--setup", "POST /things/{id}/close")
					if !tc.noCount {
						args = append(args, "--count-cmd", "cat "+filepath.Join(dir, "{id}")+" 2>/dev/null || echo 0")
					}
					skips = []string{"mismatch", "expiry"}
				} else {
					args = append(args, "--route", "POST /things", "--body", `{"name":"a","ref":"{{nonce}}"}`, "--other-body", `{"name":"b","ref":"{{nonce}}"}`)
					if !tc.noCount {
						args = append(args, "--count-cmd", "cat "+filepath.Join(dir, "{{nonce}}")+" 2>/dev/null || echo 0")
					}
				}
				args = append(args, tc.args...)
				start := time.Now()
				var stdout, stderr strings.Builder
				code := run(context.Background(), args, &stdout, &stderr)
				// A retry sent at once can reach the target before the lost
				// request and run the work itself: a PASS the contract allows,
				// which does not show the verdict this case is about.
				for try := 1; tc.racy && try < 5 && !strings.Contains(stdout.String(), `"`+string(unseen)+`"`); try++ {
					t.Logf("try %d: the retry came first; again", try)
					stdout.Reset()
					stderr.Reset()
					code = run(context.Background(), args, &stdout, &stderr)
				}
				if code != want.exit {
					t.Fatalf("exit %d, want %d\n%s%s", code, want.exit, stdout.String(), stderr.String())
				}
				if code == conformance.ExitUnusable && time.Since(start) > 30*time.Second {
					t.Errorf("an unusable target took %s to say so", time.Since(start))
				}
				if code >= conformance.ExitUsage {
					if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); code == conformance.ExitUnusable && lines != 0 {
						t.Errorf("an unusable target is one line, got:\n%s", stderr.String())
					}
					return
				}
				var rep conformance.Report
				if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
					t.Fatalf("the report does not parse: %v\n%s", err, stdout.String())
				}
				for _, res := range rep.Results {
					expected := pass
					if containsName(skips, res.Check) {
						expected = skip
					}
					if v, ok := want.verdicts[res.Check]; ok {
						expected = v
					}
					if res.Verdict != expected {
						t.Errorf("%s: %s (%s), want %s", res.Check, res.Verdict, res.Why, expected)
					}
					if res.Section == "" || res.Level == "" {
						t.Errorf("%s: no section or level: %+v", res.Check, res)
					}
				}
				if t.Failed() {
					t.Logf("the report:\n%s", stdout.String())
				}
			})
		}
	}
}

// TestEvidence: the JSON report says what it saw in fields, not prose: the
// sweep's delays and seconds in progress, the storms' rate, each intent's
// count, the suite's version and flags without header values.
func TestEvidence(t *testing.T) {
	needShell(t)
	t.Parallel()
	dir := t.TempDir()
	srv := httptest.NewServer(target.New(target.StormDuplicates, time.Minute, dir))
	defer srv.Close()
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--json",
		"--body", `{"ref":"{{nonce}}"}`, "--header", "Authorization: Bearer alice",
		"--count-cmd", "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0",
		"--only", "storm,lost-response", "--storm", "6", "--repeat", "3", "--settle", "2s",
		"--transcript", filepath.Join(dir, "transcripts")}, &stdout, &stderr)
	if code != conformance.ExitFailed {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	var rep conformance.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Version != conformance.Version || rep.Draft != conformance.Draft || len(rep.Results) != 2 {
		t.Errorf("version %q, draft %q, %d checks", rep.Version, rep.Draft, len(rep.Results))
	}
	if strings.Contains(strings.Join(rep.Flags, " "), "Bearer") || !strings.Contains(strings.Join(rep.Flags, " "), "--header=(names: Authorization)") {
		t.Errorf("flags %q: want the header's name, not its value", rep.Flags)
	}
	storm, lost := rep.Results[0].Evidence, rep.Results[1].Evidence
	if storm.Storms != 3 || storm.Duplicated != 3 || storm.Rate != "3 of 3" || len(storm.Counts) != 3 || storm.Counts[0] < 2 {
		t.Errorf("storm evidence %+v: want every storm run and counted", storm)
	}
	if len(lost.DelaysMS) != 3 || lost.DelaysMS[0] != 0 || lost.DelaysMS[2] <= lost.DelaysMS[1] || len(lost.StuckSeconds) != 3 || len(lost.Counts) != 3 || len(lost.Keys) != 3 {
		t.Errorf("lost-response evidence %+v: want a sweep of 3 delays from 0, each counted", lost)
	}
	for _, check := range []string{"storm", "lost-response"} {
		b, err := os.ReadFile(filepath.Join(dir, "transcripts", check+".txt"))
		if err != nil || !strings.Contains(string(b), "> POST ") || strings.Contains(string(b), "Bearer alice") {
			t.Errorf("the transcript of %s: %v, want its exchanges without the token:\n%.400s", check, err, b)
		}
	}
}

// TestUsage: flags the suite cannot run with are exit 2 with the reason,
// before anything is sent.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--body", "{}"},       // no route
		{"--route", "/things"}, // no method
		{"--route", "POST /things", "--profile", "lax"},
		{"--route", "POST /things", "--only", "stampede"},
		{"--route", "POST /things", "--profile", "strict", "--key-optional"},
		{"--route", "POST /things", "--count-cmd", "echo 1"},                         // no {{nonce}}
		{"--route", "POST /things", "--body", "{}", "--count-cmd", "echo {{nonce}}"}, // no {{nonce}} in the body
		{"--route", "POST /things", "--base", "localhost:8080"},
		{"--route", "POST /things", "--header", "no colon"},
	} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), args, &stdout, &stderr); code != conformance.ExitUsage || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q; want %d with the reason", args, code, stderr.String(), conformance.ExitUsage)
		}
	}
}

// TestUnusable: a target that refuses connections, or has no such route,
// is one line and exit 3.
func TestUnusable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	srv := httptest.NewServer(target.New(target.Correct, time.Minute, ""))
	defer srv.Close()
	for _, tc := range []struct{ base, route, want string }{
		{closed, "POST /things", "no answer"},
		{srv.URL, "POST /nothing", "no such route"},
		{srv.URL, "POST /things/{id}/reopen", "no setup answer filled"},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), []string{"--base", tc.base, "--route", tc.route, "--body", "{}", "--header", "Authorization: Bearer alice"}, &stdout, &stderr)
		if code != conformance.ExitUnusable || !strings.Contains(stderr.String(), tc.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s %s: exit %d, %q; want %d and one line with %q", tc.base, tc.route, code, stderr.String(), conformance.ExitUnusable, tc.want)
		}
	}
}

// TestExpiry: a key is a new intent after the --ttl; one that outlives it
// is a WARN under the draft (§2.3: the policy it publishes) and a FAIL under
// strict.
func TestExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits a TTL")
	}
	needShell(t)
	t.Parallel()
	for _, tc := range []struct {
		flaw          target.Flaw
		draft, strict conformance.Verdict
	}{
		{target.Correct, pass, pass},
		{target.NeverExpires, warn, fail},
	} {
		for profile, want := range map[string]conformance.Verdict{"draft": tc.draft, "strict": tc.strict} {
			t.Run(string(tc.flaw)+"/"+profile, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				srv := httptest.NewServer(target.New(tc.flaw, time.Second, dir))
				defer srv.Close()
				var stdout, stderr strings.Builder
				run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--json", "--profile", profile,
					"--body", `{"ref":"{{nonce}}"}`, "--header", "Authorization: Bearer alice", "--ttl", "1s", "--only", "expiry",
					"--count-cmd", "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0"}, &stdout, &stderr)
				var rep conformance.Report
				if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || len(rep.Results) != 1 {
					t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
				}
				if got := rep.Results[0]; got.Verdict != want {
					t.Errorf("expiry: %s (%s), want %s", got.Verdict, got.Why, want)
				}
			})
		}
	}
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// needShell: --count-cmd runs through sh.
func needShell(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run --count-cmd: ", err)
	}
}
