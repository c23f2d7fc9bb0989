package conformance_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/conformance"
	"github.com/demo-api/demo-api/internal/tools/targetapi"
)

// ttl is the test servers' key lifetime: every check but expiry must end
// within it on a loaded machine, or a key expires under the check.
const ttl = 8 * time.Second

// config is every check's input against a targetapi server at base, so
// that no check is skipped.
func config(base string) conformance.Config {
	return conformance.Config{
		Base: base, Method: "POST", Path: "/things",
		Body: []byte(`{"name":"first"}`), OtherBody: []byte(`{"name":"other"}`),
		Header:     http.Header{"Authorization": {"Bearer alice"}},
		OtherActor: http.Header{"Authorization": {"Bearer bob"}},
		FailHeader: http.Header{"Target-Fail": {"true"}},
		TTL:        ttl,
		Storm:      12,
		Repeat:     3,
		Settle:     3 * time.Second,
	}
}

// TestFlawsAreCaught runs the suite against a correct server and against
// one broken in each usual way: each flaw fails (or, where the contract
// allows it, warns on) exactly the check made for it. A check that could
// not fail, or one that fails for another check's flaw, fails this test.
func TestFlawsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the checks against every flawed server: a test of the checker, not of the contract")
	}
	t.Parallel()
	cases := []struct {
		flaw       targetapi.Flaw
		fail, warn []string
	}{
		{flaw: targetapi.None},
		{flaw: targetapi.KeyOptional, fail: []string{"key-missing"}},
		{flaw: targetapi.AnyKey, fail: []string{"key-malformed"}},
		{flaw: targetapi.FirstKeyWins, fail: []string{"key-twice"}},
		{flaw: targetapi.CheckThenInsert, fail: []string{"storm"}},
		{flaw: targetapi.NoFingerprint, fail: []string{"mismatch"}},
		{flaw: targetapi.MismatchAs409, warn: []string{"mismatch"}},
		{flaw: targetapi.Rerender, fail: []string{"replay"}},
		{flaw: targetapi.NoRetryAfter, warn: []string{"storm"}},
		{flaw: targetapi.DiesWithClient, fail: []string{"lost-response"}},
		{flaw: targetapi.GlobalKeys, fail: []string{"scope"}},
		{flaw: targetapi.NeverExpires, fail: []string{"expiry"}},
		{flaw: targetapi.StoresFailures, fail: []string{"failure-not-stored"}},
	}
	// The runs mostly wait (a TTL, a retry's pause), so they all run at
	// once rather than as parallel subtests, which -parallel would queue.
	reports := make([]conformance.Report, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		srv := httptest.NewServer(targetapi.New(tc.flaw, ttl))
		defer srv.Close()
		wg.Go(func() { reports[i], errs[i] = conformance.Run(context.Background(), config(srv.URL)) })
	}
	wg.Wait()
	for i, tc := range cases {
		name := string(tc.flaw)
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			rep := reports[i]
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			var text strings.Builder
			rep.WriteText(&text)
			if got := names(rep, conformance.Fail); !slices.Equal(got, tc.fail) {
				t.Errorf("failed %v, want %v:\n%s", got, tc.fail, text.String())
			}
			if got := names(rep, conformance.Warn); !slices.Equal(got, tc.warn) {
				t.Errorf("warned %v, want %v:\n%s", got, tc.warn, text.String())
			}
			if got := names(rep, conformance.Skip); len(got) > 0 {
				t.Errorf("skipped %v, want every check run:\n%s", got, text.String())
			}
			if rep.Failed() != (len(tc.fail) > 0) {
				t.Errorf("Failed() = %v with %d failures", rep.Failed(), len(tc.fail))
			}
		})
	}
}

// TestNoFirstResult: a route that refuses the body fails first-request, and
// the checks that reuse its key say so instead of passing.
func TestNoFirstResult(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(targetapi.New(targetapi.None, ttl))
	defer srv.Close()
	cfg := config(srv.URL)
	cfg.Path = "/nothing-here"
	rep, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		check string
		want  conformance.Verdict
		why   string
	}{
		{"first-request", conformance.Fail, "404 for a fresh key"},
		{"replay", conformance.Skip, "first-request failed"},
		{"mismatch", conformance.Skip, "first-request failed"},
	} {
		res := result(rep, c.check)
		if res.Verdict != c.want || !strings.Contains(res.Why, c.why) {
			t.Errorf("%s: %s %q, want %s with %q", c.check, res.Verdict, res.Why, c.want, c.why)
		}
	}
}

// TestSkipsSayWhy: without a second actor, a TTL or a way to make the
// target fail, those checks are SKIP naming the flag, and the report lists
// them as not checked; the rest still pass.
func TestSkipsSayWhy(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(targetapi.New(targetapi.None, ttl))
	defer srv.Close()
	cfg := config(srv.URL)
	cfg.OtherActor, cfg.TTL, cfg.FailHeader = nil, 0, nil
	rep, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"scope": "--other-actor-header", "expiry": "--ttl", "failure-not-stored": "--fail-header"}
	if got := names(rep, conformance.Skip); !slices.Equal(got, []string{"scope", "expiry", "failure-not-stored"}) {
		t.Fatalf("skipped %v", got)
	}
	var text strings.Builder
	rep.WriteText(&text)
	for check, flag := range want {
		if !strings.Contains(text.String(), "not checked: "+check+": ") || !strings.Contains(result(rep, check).Why, flag) {
			t.Errorf("%s: the report does not say it was not checked for want of %s:\n%s", check, flag, text.String())
		}
	}
	if got := names(rep, conformance.Pass); len(got) != len(conformance.Names())-3 || rep.Failed() {
		t.Errorf("passed %v:\n%s", got, text.String())
	}
	if !strings.Contains(text.String(), "11 checks: 8 PASS, 3 SKIP") {
		t.Errorf("no summary line:\n%s", text.String())
	}
}

// TestConfigRefused: a config the suite cannot use is an error, not a report.
func TestConfigRefused(t *testing.T) {
	for _, mutate := range []func(*conformance.Config){
		func(c *conformance.Config) { c.Base = "localhost:8080" },
		func(c *conformance.Config) { c.Path = "things" },
		func(c *conformance.Config) { c.OtherBody = nil },
		func(c *conformance.Config) { c.Storm = 1 },
	} {
		cfg := config("http://127.0.0.1:1")
		mutate(&cfg)
		if _, err := conformance.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) took it", cfg)
		}
	}
}

func names(rep conformance.Report, v conformance.Verdict) []string {
	var out []string
	for _, res := range rep.Results {
		if res.Verdict == v {
			out = append(out, res.Check)
		}
	}
	return out
}

func result(rep conformance.Report, check string) conformance.Result {
	for _, res := range rep.Results {
		if res.Check == check {
			return res
		}
	}
	return conformance.Result{}
}
