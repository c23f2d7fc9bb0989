// Command demo-chaos is make chaos: a fault campaign the project can repeat.
// It starts a durable throw-away PostgreSQL, the review desk, and two
// replicas of the real demo-api serve binary, each reaching PostgreSQL
// through a fault proxy (internal/tools/pgtest/proxy.go). Then, one scenario at a time,
// it sends intents through the project's Go client (api/client: one key per
// intent, a time budget, retries with the same key) from many workers spread
// over both replicas, breaks something while they run, heals it, and checks
// in SQL and against what the clients saw that:
//
//   - every intent has at most one business row, and one exactly when the
//     create happened;
//   - every intent a client saw succeed has its row, with the requestId the
//     client got;
//   - every "outcome unknown" is settled by the outcome route;
//   - no key stays in progress past its lease and a margin;
//   - every completed key, sent again, replays the bytes it stored;
//   - the outbox drains: each request is submitted to the desk once, with
//     the desk's reference;
//   - the expedites (a few per second beside the creates, expedite.go):
//     at most one slot and one charge at the desk per request, every 201 a
//     client saw a confirmed order with that answer's slot and charge, every
//     run settled (or needing attention, reported), and the account debited
//     once per charge;
//   - the load's actor never meets the bound on new keys; in the flood
//     scenario (flood.go) a second actor's flood of new keys does, and
//     nothing is stored for its 429s.
//
// It prints a markdown report and writes it between the markers of
// docs/chaos.md, with a timeline of each scenario's answers next to it
// (chart.go), prints its progress with the time left, and exits 1 when a check fails. Liveness (503s, 409s, how
// long a key stayed blocked, /readyz and /metrics during the fault) is
// reported, not judged.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	scenarios string
	short     bool
	intents   int
	workers   int
	work      time.Duration
	out       string
	keep      bool
}

func main() {
	var o options
	flag.StringVar(&o.scenarios, "scenarios", "", "comma-separated scenarios to run (default: all): "+strings.Join(scenarioNames(), ", "))
	flag.BoolVar(&o.short, "short", false, "the short campaign make test runs: two scenarios, a few hundred intents")
	flag.IntVar(&o.intents, "intents", 15000, "intents in the campaign, shared out among its scenarios (at least; a scenario that runs long sends more)")
	flag.IntVar(&o.workers, "workers", 24, "concurrent clients")
	flag.DurationVar(&o.work, "work", 300*time.Millisecond, "every 4th intent holds its claim this long (Workshop-Delay), as a create with outside work would, so that faults meet claims in progress (0: none)")
	flag.StringVar(&o.out, "out", "docs/chaos.md", "markdown file to write the report into, between its markers (empty: none)")
	flag.BoolVar(&o.keep, "keep", false, "keep the processes' logs (they are kept anyway when a check fails)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, o, os.Stderr)
	if rep != nil {
		fmt.Print(rep.markdown())
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo-chaos:", err)
		os.Exit(1)
	case rep.failed():
		fmt.Fprintln(os.Stderr, "demo-chaos: FAILED:", strings.Join(rep.failures(), "; "))
		os.Exit(1)
	}
}

// run runs the campaign of o and returns its report; an error means the
// campaign could not run (or its report not be written), not that a check
// failed.
func run(ctx context.Context, o options, progress io.Writer) (rep *report, err error) {
	began := time.Now()
	scs, err := pick(o)
	if err != nil {
		return nil, err
	}
	if o.short {
		o.intents, o.workers = min(o.intents, 400), min(o.workers, 8)
	}
	if o.intents < 1 || o.workers < 1 {
		return nil, fmt.Errorf("-intents and -workers must be at least 1")
	}
	env, err := setUp(ctx, progress)
	if err != nil {
		return nil, err
	}
	env.keep = o.keep
	defer func() {
		env.keep = env.keep || err != nil || rep.failed()
		env.tearDown()
	}()
	rep = &report{started: began, short: o.short, workers: o.workers, intents: o.intents, work: o.work, pgSource: env.pg.Source}
	// The time left: what the scenarios still to run should take (their
	// timelines and a guess at their checks), scaled by how the finished
	// ones compared with that.
	planned := func(sc scenario) time.Duration {
		d := time.Second + sc.hold + cmp.Or(sc.after, afterHeal) + 4*time.Second
		if sc.prepare != nil {
			d += 25 * time.Second // a formation, a desk, the replicas moved there and back
		}
		return d
	}
	var todo, done time.Duration
	for _, sc := range scs {
		todo += planned(sc)
	}
	start := time.Now()
	left := func() time.Duration {
		if done == 0 {
			return todo.Round(time.Second)
		}
		return time.Duration(float64(todo) * float64(time.Since(start)) / float64(done)).Round(time.Second)
	}
	for n, sc := range scs {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		env.logf("scenario %d/%d %s: starts; about %s left", n+1, len(scs), sc.name, left())
		scStart := time.Now()
		res, err := env.runScenario(ctx, sc, n+1, max(o.intents/len(scs), 1), o)
		if err != nil {
			return rep, fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		rep.results = append(rep.results, res)
		todo, done = todo-planned(sc), done+planned(sc)
		env.logf("scenario %d/%d %s: ends after %s: %d intents, %d duplicates, %d lost acknowledgements; %d expedites: %d confirmed, %d refused, %d needing attention, %d duplicated effects, %d lost acknowledgements; failures: %v; about %s left",
			n+1, len(scs), sc.name, time.Since(scStart).Round(100*time.Millisecond), res.intents, res.duplicates, res.lostAcks,
			res.ex.sent, res.ex.confirmed, res.ex.refused, res.ex.attention, res.ex.duplicates, res.ex.lostAcks, res.failures, left())
	}
	rep.elapsed = time.Since(began)
	if o.out != "" {
		if err := writeSection(o.out, rep.markdown()); err != nil {
			return rep, err
		}
		if err := rep.writeCharts(filepath.Dir(o.out)); err != nil {
			return rep, err
		}
		env.logf("wrote %s and its timelines", o.out)
	}
	return rep, nil
}

// pick returns the scenarios o asks for.
func pick(o options) ([]scenario, error) {
	if o.short {
		o.scenarios = "sigkill-replica,cut-link-3s"
	}
	if o.scenarios == "" {
		return scenarios, nil
	}
	var out []scenario
	for name := range strings.SplitSeq(o.scenarios, ",") {
		found := false
		for _, sc := range scenarios {
			if sc.name == strings.TrimSpace(name) {
				out, found = append(out, sc), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no scenario %q; the scenarios: %s", name, strings.Join(scenarioNames(), ", "))
		}
	}
	return out, nil
}
