package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
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
			draft:  graded{4, V{"lost-response": unseen}},
			strict: graded{4, V{"lost-response": unseen}}},
		{name: "correct, no count, inconclusive allowed", flaw: target.Correct, noCount: true, args: []string{"--allow-inconclusive"},
			draft:  graded{0, V{"lost-response": unseen}},
			strict: graded{0, V{"lost-response": unseen}}},
		{name: "201 with Location and no body", flaw: target.EmptyCreated},
		{name: "201 with Location and no body, no count", flaw: target.EmptyCreated, noCount: true,
			draft:  graded{4, V{"lost-response": unseen}},
			strict: graded{4, V{"lost-response": unseen}}},
		{name: "204", flaw: target.NoContent},
		{name: "204, no count", flaw: target.NoContent, noCount: true,
			draft:  graded{4, V{"replay": unseen, "storm": unseen, "lost-response": unseen, "scope": unseen}},
			strict: graded{4, V{"replay": unseen, "storm": unseen, "lost-response": unseen, "scope": unseen}}},
		{name: "a lost result after a hang-up", flaw: target.LostResult,
			draft:  graded{0, V{"lost-response": warn}},
			strict: graded{1, V{"lost-response": fail}}},
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
			draft:  graded{4, V{"key-missing": warn, "key-malformed": warn, "key-twice": warn, "replay": unseen, "mismatch": unseen, "storm": unseen, "lost-response": unseen, "scope": unseen, "failure-not-stored": skip}},
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
			draft:  graded{0, V{"mismatch": warn}},
			strict: graded{1, V{"mismatch": fail}}},
		{name: "mismatch answered 409", flaw: target.MismatchAs409,
			draft:  graded{0, V{"mismatch": warn}},
			strict: graded{1, V{"mismatch": fail}}},
		{name: "a long Retry-After", flaw: target.LongRetryAfter, args: []string{"--storms", "3", "--hangups", "3"}},
		{name: "a Retry-After past --settle", flaw: target.LongRetryAfter, racy: true, args: []string{"--hangups", "1", "--settle", "1500ms", "--only", "lost-response"},
			draft:  graded{4, V{"lost-response": unseen}},
			strict: graded{4, V{"lost-response": unseen}}},
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
					"--fail-header", "Target-Fail: true", "--storm", "8", "--storms", "5", "--hangups", "5", "--settle", "3s", "--timeout", "5s"}
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

// TestEvidence: the JSON report says what it saw in fields, not prose:
// each intent's key, nonce, statuses, count, and for a hang-up its delay
// and seconds in progress; the suite's version and flags without header
// values or the --count-cmd; a transcript, stamped, for every check that
// did not pass, with the count calls and the actors told apart; JUnit.
func TestEvidence(t *testing.T) {
	needShell(t)
	t.Parallel()
	dir := t.TempDir()
	srv := httptest.NewServer(target.New(target.StormDuplicates, time.Minute, dir))
	defer srv.Close()
	countCmd := "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0"
	transcripts, junit := filepath.Join(dir, "transcripts"), filepath.Join(dir, "report.xml")
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--json",
		"--body", `{"ref":"{{nonce}}"}`, "--header", "Authorization: Bearer alice", "--count-cmd", countCmd,
		"--only", "storm,lost-response", "--storm", "6", "--storms", "3", "--hangups", "3", "--settle", "2s",
		"--transcript", transcripts, "--junit", junit}, &stdout, &stderr)
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
	flags := strings.Join(rep.Flags, " ")
	if strings.Contains(stdout.String(), "Bearer") || strings.Contains(stdout.String(), "cat ") ||
		!strings.Contains(flags, "--header=(names: Authorization)") || !strings.Contains(flags, "--count-cmd=(given)") {
		t.Errorf("flags %q: want the header's name and no --count-cmd, and neither anywhere in the report", rep.Flags)
	}
	storm, lost := rep.Results[0].Evidence, rep.Results[1].Evidence
	if storm.Storms != 3 || storm.Duplicated != 3 || len(storm.Intents) != 3 || storm.CouldMiss == "" {
		t.Errorf("storm evidence %+v: want 3 storms, each duplicated, each an intent", storm)
	}
	for _, in := range storm.Intents {
		if in.Key == "" || in.Nonce == "" || len(in.Statuses) != 7 || in.Count == nil || *in.Count < 2 {
			t.Errorf("a storm's intent %+v: want its key, nonce, 6+1 statuses and a count of at least 2", in)
		}
	}
	if len(lost.Intents) != 3 || lost.HangUps != 3 || lost.CouldMiss == "" {
		t.Fatalf("lost-response evidence %+v: want a sweep of 3", lost)
	}
	for i, in := range lost.Intents {
		if in.DelayMS == nil || in.InProgressS == nil || in.Count == nil || in.Nonce == "" ||
			(i == 0 && *in.DelayMS != 0) || (i > 0 && *in.DelayMS <= *lost.Intents[i-1].DelayMS) {
			t.Errorf("hang-up %d: %+v: want a delay rising from 0, seconds in progress and a count", i, in)
		}
	}
	stamp := regexp.MustCompile(`(?m)^\[\d\d:\d\d:\d\d\.\d{3} \+[0-9.µm]+s\]$`)
	for _, check := range []string{"storm", "lost-response"} {
		b, err := os.ReadFile(filepath.Join(transcripts, check+".txt"))
		text := string(b)
		if err != nil || !strings.Contains(text, "> POST ") || !stamp.MatchString(text) ||
			!strings.Contains(text, "$ --count-cmd for ") || !strings.Contains(text, "Authorization: (--header)") || strings.Contains(text, "Bearer alice") {
			t.Errorf("the transcript of %s: %v, want stamped exchanges and counts, the token named by its flag:\n%.600s", check, err, b)
		}
	}
	var suite struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Cases    []struct {
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
		} `xml:"testcase"`
	}
	if b, err := os.ReadFile(junit); err != nil || xml.Unmarshal(b, &suite) != nil || suite.Tests != 2 || suite.Failures != 2 || suite.Cases[0].Failure == nil {
		t.Errorf("--junit: %v, %+v: want 2 cases, both failures", err, suite)
	}

	// A WARN has its transcript too, and two actors are told apart.
	for _, tc := range []struct {
		flaw  target.Flaw
		check string
		want  []string
	}{
		{target.LostResult, "lost-response", []string{"lost result", "$ --count-cmd for "}},
		{target.GlobalLeak, "scope", []string{"Authorization: (--header)", "Authorization: (--other-actor-header)"}},
	} {
		dir := t.TempDir()
		srv := httptest.NewServer(target.New(tc.flaw, time.Minute, dir))
		defer srv.Close()
		var stdout, stderr strings.Builder
		run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things",
			"--body", `{"ref":"{{nonce}}"}`, "--header", "Authorization: Bearer alice", "--other-actor-header", "Authorization: Bearer bob",
			"--count-cmd", "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0",
			"--only", tc.check, "--hangups", "4", "--settle", "1s", "--transcript", dir}, &stdout, &stderr)
		b, err := os.ReadFile(filepath.Join(dir, tc.check+".txt"))
		for _, want := range tc.want {
			if err != nil || !strings.Contains(string(b), want) {
				t.Errorf("%s: the transcript of %s: %v, want %q in it:\n%s%.800s", tc.flaw, tc.check, err, want, stdout.String(), b)
			}
		}
	}
}

// TestOnlyChangesNoVerdict: what a check needs (the replay mark) is learned
// in the preflight, so a check run alone is graded as in company.
func TestOnlyChangesNoVerdict(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(target.New(target.Correct, time.Minute, ""))
	defer srv.Close()
	var got []conformance.Verdict
	for _, only := range []string{"refusal-replayed", "replay,refusal-replayed"} {
		var stdout, stderr strings.Builder
		run(context.Background(), []string{"--base", srv.URL, "--json", "--profile", "strict", "--allow-inconclusive",
			"--route", "POST /things/{id}/reopen", "--setup", `POST /things {"ref":"{{nonce}}"}`, "--setup", "POST /things/{id}/close",
			"--header", "Authorization: Bearer alice", "--only", only}, &stdout, &stderr)
		var rep conformance.Report
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
			t.Fatalf("--only %s: %v\n%s%s", only, err, stdout.String(), stderr.String())
		}
		got = append(got, verdictOf(rep, "refusal-replayed"))
	}
	if got[0] != pass || got[1] != pass {
		t.Errorf("refusal-replayed alone: %s, after replay: %s; want PASS both", got[0], got[1])
	}
}

// TestCountCmdBroken: a --count-cmd that fails is reported as itself, with
// its stderr, exit 2: not as the target.
func TestCountCmdBroken(t *testing.T) {
	needShell(t)
	t.Parallel()
	srv := httptest.NewServer(target.New(target.Correct, time.Minute, ""))
	defer srv.Close()
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--body", `{"ref":"{{nonce}}"}`,
		"--header", "Authorization: Bearer alice", "--count-cmd", "echo 'no such table' >&2; exit 3 # {{nonce}}"}, &stdout, &stderr)
	if code != conformance.ExitUsage || !strings.Contains(stderr.String(), "--count-cmd failed") ||
		!strings.Contains(stderr.String(), "no such table") || strings.Contains(stderr.String(), "unusable") {
		t.Errorf("exit %d, %q: want %d, the count's failure and its stderr", code, stderr.String(), conformance.ExitUsage)
	}
}

// TestStopsAnswering: a target that answers the preflight and then stops
// answering (refusing connections, or holding them) ends the run with
// exit 3, soon.
func TestStopsAnswering(t *testing.T) {
	needShell(t)
	t.Parallel()
	for _, how := range []string{"refuses", "hangs"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			api := target.New(target.Correct, time.Minute, dir)
			var srv *httptest.Server
			var served atomic.Int64
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if served.Add(1) <= 12 { // the preflight and a few checks
					api.ServeHTTP(w, r)
					return
				}
				if how == "hangs" {
					io.Copy(io.Discard, r.Body) // then its client's hang-up ends the request's context
					<-r.Context().Done()
					return
				}
				go func() {
					srv.Listener.Close()
					srv.CloseClientConnections()
				}()
			}))
			defer srv.Close()
			start := time.Now()
			var stdout, stderr strings.Builder
			code := run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--body", `{"ref":"{{nonce}}"}`,
				"--header", "Authorization: Bearer alice", "--timeout", "1s", "--settle", "2s",
				"--count-cmd", "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0"}, &stdout, &stderr)
			if code != conformance.ExitUnusable || !strings.Contains(stderr.String(), "stopped answering") {
				t.Errorf("exit %d, %q; want %d, it stopped answering", code, stderr.String(), conformance.ExitUnusable)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("took %s to say so", took)
			}
		})
	}
}

// defaultRun runs the command with its default power against a target
// with flaw, and returns the report.
func defaultRun(t testing.TB, flaw target.Flaw, windowAt time.Duration) (int, conformance.Report, string) {
	dir := t.TempDir()
	api := target.New(flaw, time.Minute, dir)
	api.WindowAt = windowAt
	srv := httptest.NewServer(api)
	defer srv.Close()
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"--base", srv.URL, "--route", "POST /things", "--json",
		"--body", `{"ref":"{{nonce}}"}`, "--other-body", `{"ref":"{{nonce}}","more":1}`, "--header", "Authorization: Bearer alice",
		"--settle", "5s", "--count-cmd", "cat " + filepath.Join(dir, "{{nonce}}") + " 2>/dev/null || echo 0"}, &stdout, &stderr)
	var rep conformance.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s%s", code, err, stdout.String(), stderr.String())
	}
	return code, rep, stdout.String()
}

// rareFaults are the faults the defaults must find in at least 19 runs of
// 20: a storm duplicate in 1 storm of 6, and a 10 ms hang-up window at the
// start, the middle and the end of the work.
var rareFaults = []struct {
	name     string
	flaw     target.Flaw
	windowAt time.Duration
	check    string
}{
	{"storm duplicate in 1 of 6", target.RareStorm, 0, "storm"},
	{"hang-up window at 0ms", target.HangUpWindow, 0, "lost-response"},
	{"hang-up window at 25ms", target.HangUpWindow, target.Work/2 - target.Window/2, "lost-response"},
	{"hang-up window at 50ms", target.HangUpWindow, target.Work - target.Window, "lost-response"},
}

// TestDefaultsFindRareFaults: the defaults find each rare fault. A miss is
// possible (a storm duplicate in 1 of 6 escapes 24 storms in 1.3% of runs,
// and a machine under load shifts a hang-up past a window), so up to three
// runs are allowed; BenchmarkCatchRate measures the rate.
func TestDefaultsFindRareFaults(t *testing.T) {
	needShell(t)
	t.Parallel()
	for _, f := range rareFaults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			for try := 1; ; try++ {
				code, rep, out := defaultRun(t, f.flaw, f.windowAt)
				if verdictOf(rep, f.check) == fail && code == conformance.ExitFailed {
					return
				}
				if try == 3 {
					t.Fatalf("the defaults missed it three times: exit %d\n%s", code, out)
				}
				t.Logf("run %d missed it (exit %d): again", try, code)
			}
		})
	}
}

// BenchmarkCatchRate runs the defaults against each rare fault b.N times
// and reports the share of runs whose check FAILed: docs/conformance.md
// gives the figures of
//
//	go test -run '^$' -bench CatchRate -benchtime 20x ./cmd/idemcheck/
func BenchmarkCatchRate(b *testing.B) {
	for _, f := range rareFaults {
		b.Run(f.name, func(b *testing.B) {
			caught := 0
			for b.Loop() {
				if _, rep, _ := defaultRun(b, f.flaw, f.windowAt); verdictOf(rep, f.check) == fail {
					caught++
				}
			}
			b.ReportMetric(float64(caught), "caught")
			b.ReportMetric(float64(b.N), "runs")
		})
	}
}

func verdictOf(rep conformance.Report, check string) conformance.Verdict {
	for _, res := range rep.Results {
		if res.Check == check {
			return res.Verdict
		}
	}
	return ""
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
