package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestIdemcheckStrict runs idemcheck, the conformance suite of the nested
// module conformance/ (built from this tree, as go install would), against
// demo-api on a real PostgreSQL under --profile strict, with the workshop
// knobs off and on, on the create and on the cancel (a state change, set up
// by a create). Its --count-cmd counts the business rows. Every run exits
// 0, and each check gets the verdict the contract's branch must get: PASS,
// or SKIP where the run gives the suite no way in (no fault knob, no second
// body for a cancel). Under --profile draft, the one place demo-api departs
// from the draft shows: its one-phase create holds a concurrent duplicate
// until the first commits and replays it, where §2.6 asks a 409 (a SHOULD:
// WARN).
func TestIdemcheckStrict(t *testing.T) {
	testenv.Long(t, "builds the conformance module and runs its storms, hang-ups and expiry against the server")
	t.Parallel() // mostly waiting on the server's timers: it overlaps TestCopyFollowsItsName's builds
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the --count-cmd of this test runs curl: install it (scripts/setup.sh does)")
	}
	bin := filepath.Join(t.TempDir(), "idemcheck")
	if out, err := exec.Command("go", "build", "-C", "../../conformance", "-o", bin, "./cmd/idemcheck").CombinedOutput(); err != nil {
		t.Fatalf("go build -C conformance: %v\n%s", err, out)
	}
	const otherToken = "tok-e2e-other-7a1f"
	for _, knobs := range []bool{false, true} {
		t.Run(fmt.Sprintf("workshop=%v", knobs), func(t *testing.T) {
			base, db := testenv.ServeInProcess(t, run, fmt.Sprintf("WORKSHOP=%v", knobs),
				"IDEMPOTENCY_TTL=3s", "IDEMPOTENCY_LEASE=3s",
				"API_TOKENS=alice:"+auth.Hash(testenv.TokenAlice)+",bob:"+auth.Hash(otherToken))
			counter := countServer(t, db)
			common := []string{"--base", base, "--profile", "strict", "--json",
				"--header", "Authorization: Bearer " + testenv.TokenAlice,
				"--other-actor-header", "Authorization: Bearer " + otherToken,
				"--ttl", "3s", "--storm", "16", "--storms", "3", "--hangups", "5"}
			skipped := map[string]bool{}
			if knobs {
				// Every request takes the two-phase path and holds its claim
				// 200 ms: storms meet 409s, and hang-ups land inside the work.
				common = append(common, "--header", "Workshop-Delay: 200ms", "--fail-header", "Workshop-Fail: after-claim")
			} else {
				skipped["failure-not-stored"] = true
			}
			create := []string{"--route", "POST /v1/demo-requests",
				"--body", `{"topic":"billing","note":"{{nonce}}"}`,
				"--other-body", `{"topic":"shipping","note":"{{nonce}}"}`,
				"--refused-body", `{"topic":"blocked","note":"{{nonce}}"}`,
				"--count-cmd", "curl -sf '" + counter + "/created?note={{nonce}}'"}
			t.Run("create", func(t *testing.T) {
				runIdemcheck(t, bin, skipped, append(common, create...)...)
			})
			if !knobs {
				t.Run("create, draft", func(t *testing.T) {
					draft := append(slices.Clone(common), create...)
					draft[slices.Index(draft, "strict")] = "draft"
					rep := idemcheck(t, bin, append(draft, "--only", "storm")...)
					if len(rep.Checks) != 1 || rep.Checks[0].Verdict != "WARN" || !strings.Contains(rep.Checks[0].Why, "not 409") || rep.Exit != 0 {
						t.Errorf("%+v: want the storm WARN, held duplicates instead of 409, and exit 0", rep)
					}
				})
			}
			t.Run("cancel", func(t *testing.T) {
				cancelSkipped := map[string]bool{"mismatch": true} // a cancel has no body to differ
				for k := range skipped {
					cancelSkipped[k] = true
				}
				runIdemcheck(t, bin, cancelSkipped, append(common, "--route", "POST /v1/demo-requests/{requestId}/cancel",
					"--setup", `POST /v1/demo-requests {"topic":"billing","note":"{{nonce}}"}`,
					"--count-cmd", "curl -sf '"+counter+"/cancelled?id={requestId}'")...)
			})
		})
	}
}

// report is what these tests read of idemcheck's JSON report.
type report struct {
	Profile string `json:"profile"`
	Checks  []struct {
		Check, Verdict, Why string
	} `json:"checks"`
	Exit int `json:"exit"`
}

// idemcheck runs the command and returns its report.
func idemcheck(t *testing.T, bin string, args ...string) report {
	t.Helper()
	cmd := exec.CommandContext(testenv.Context(t), bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("idemcheck: %v\n%s%s", err, out, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("the report does not parse: %v\n%s", err, out)
	}
	return rep
}

// runIdemcheck runs the command and checks its exit code and each verdict.
func runIdemcheck(t *testing.T, bin string, skipped map[string]bool, args ...string) {
	t.Helper()
	rep := idemcheck(t, bin, args...)
	if rep.Profile != "strict" || rep.Exit != 0 || len(rep.Checks) != 12 {
		t.Errorf("profile %q, exit %d, %d checks; want strict, 0 and 12", rep.Profile, rep.Exit, len(rep.Checks))
	}
	for _, c := range rep.Checks {
		want := "PASS"
		if skipped[c.Check] {
			want = "SKIP"
		}
		if c.Verdict != want {
			t.Errorf("%s: %s (%s), want %s", c.Check, c.Verdict, c.Why, want)
		}
		t.Logf("%-8s %-18s %s", c.Verdict, c.Check, c.Why)
	}
}

// countServer answers what a --count-cmd asks: the demo requests made with
// a note, and whether one request was cancelled (0 or 1: a cancel is one
// transition).
func countServer(t *testing.T, db *sqlx.DB) string {
	count := func(w http.ResponseWriter, query string, arg string) {
		var n int
		if err := db.Get(&n, query, arg); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /created", func(w http.ResponseWriter, r *http.Request) {
		count(w, `SELECT count(*) FROM demo_requests WHERE note = $1`, r.URL.Query().Get("note"))
	})
	mux.HandleFunc("GET /cancelled", func(w http.ResponseWriter, r *http.Request) {
		count(w, `SELECT count(*) FROM demo_requests WHERE id::text = $1 AND state = 'cancelled'`, r.URL.Query().Get("id"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}
