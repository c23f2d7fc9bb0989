package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	xp "github.com/demo-api/demo-api/demo/internal/expedite"
)

// report is a campaign's figures.
type report struct {
	started  time.Time
	elapsed  time.Duration
	short    bool
	workers  int
	intents  int
	work     time.Duration
	pgSource string
	results  []*result
}

func (r *report) failures() []string {
	var out []string
	for _, res := range r.results {
		for _, f := range res.failures {
			out = append(out, res.scenario.name+": "+f)
		}
	}
	return out
}

func (r *report) failed() bool { return len(r.failures()) > 0 }

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cmd := "`make chaos`"
	if r.short {
		cmd = "`go run ./cmd/demo-chaos -short`"
	}
	work := "no intent holds its claim"
	if r.work > 0 {
		work = fmt.Sprintf("every 4th intent holds its claim %s (`Workshop-Delay`)", r.work)
	}
	p("## Latest campaign\n\n%s, %s, %s in all; PostgreSQL: %s, durable; two `demo-api serve` replicas (lease %s; replica 1 %s, replica 2 %s), "+
		"each through its own fault proxy; the review desk; %d workers sending at least %d intents, spread evenly over each scenario's timeline; %s. "+
		"Each intent goes through api/client (one key, a %s budget per replica, a 2 s attempt timeout); "+
		"after a transport error or a spent budget it moves, same key and bytes, to the other replica, for %s at most.\n\n",
		cmd, r.started.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second), r.pgSource, lease, paths[0], paths[1],
		r.workers, r.intents, work, sendBudget, intentBudget)
	verdict := "every check passed"
	if r.failed() {
		verdict = fmt.Sprintf("**%d checks FAILED**", len(r.failures()))
	}
	total, dups, lost := 0, 0, 0
	for _, res := range r.results {
		total, dups, lost = total+res.intents, dups+res.duplicates, lost+res.lostAcks
	}
	xs, xdups, xlost, xconf, xatt := 0, 0, 0, 0, 0
	for _, res := range r.results {
		xs, xdups, xlost = xs+res.ex.sent, xdups+res.ex.duplicates, xlost+res.ex.lostAcks
		xconf, xatt = xconf+res.ex.confirmed, xatt+res.ex.attention
	}
	var byDesign []string // the scenarios that lose acknowledgements on purpose, and how many
	for _, res := range r.results {
		if res.scenario.lossReported && res.lostAcks+res.ex.lostAcks > 0 {
			byDesign = append(byDesign, fmt.Sprintf("%s %d", res.scenario.name, res.lostAcks+res.ex.lostAcks))
		}
	}
	if len(byDesign) > 0 {
		verdict += fmt.Sprintf(" (the lost acknowledgements are those of asynchronous replication, counted, not failed: %s)", strings.Join(byDesign, ", "))
	}
	p("**%d intents, %d duplicates, %d lost acknowledgements; %d expedites (%d confirmed, %d needing attention), %d duplicated external effects, %d lost acknowledgements: %s.**\n\n",
		total, dups, lost, xs, xconf, xatt, xdups, xlost, verdict)
	p("| scenario | intents | created / refused / unknown | unknown settled: completed / never / lease passed (sent again) | moved replica | duplicates | lost acks | replays byte-identical | 5xx and no answer (attempts) | 409s | longest blocked | blocked after the heal: owner alive / died | recovery | deliveries (desk submissions) |\n")
	p("|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|---|---:|---|\n")
	for _, res := range r.results {
		var fivexx []string
		for _, k := range slices.Sorted(maps.Keys(res.statuses)) {
			if k != "409" {
				fivexx = append(fivexx, fmt.Sprintf("%s: %d", k, res.statuses[k]))
			}
		}
		var dl []string
		for _, k := range slices.Sorted(maps.Keys(res.deliveries)) {
			dl = append(dl, fmt.Sprintf("%s %d", k, res.deliveries[k]))
		}
		if res.reconciled > 0 {
			dl = append(dl, fmt.Sprintf("(%d submitted after a reconcile)", res.reconciled))
		}
		p("| %s | %d | %d / %d / %d | %d / %d / %d | %d | %d | %d | %d of %d | %s | %d | %s | %s / %s | %s | %s (%d) |\n",
			res.scenario.name, res.intents, res.created, res.refused, res.unknown, res.resolvedCompleted, res.resolvedNever, res.resolvedLeasePassed, res.hops,
			res.duplicates, res.lostAcks, res.replaysIdentical, res.intents, orNone(strings.Join(fivexx, ", ")), res.statuses["409"],
			res.longestBlocked.Round(time.Millisecond), res.blockedAfterHeal[0].Round(time.Millisecond),
			res.blockedAfterHeal[1].Round(time.Millisecond), recovery(res.recovery), strings.Join(dl, ", "), res.deskSubmissions)
	}
	p("\n\"Moved replica\": intents whose client met a transport error or spent its budget on one replica and sent the same key to the other. " +
		"\"5xx and no answer\" counts attempts: refused (connection refused), timeout (no answer within the 2 s attempt), broken (reset or EOF). " +
		"\"Longest blocked\" runs from a key's first 409 to its definite answer; \"after the heal\" from the heal (or a later first 409), " +
		"split by whether the key's owner may have died (an attempt broke under the request: its replica was killed), whose claim waits for its lease by design. \"Recovery\" runs from the heal to the first success of an intent that began after it. " +
		"Deliveries are the scenario's outbox rows after the drain, by state; an unknown or failed one is expected only where the desk misbehaved, and is listed below, then reconciled.\n\n")
	r.failoverSection(p)
	r.floodSection(p)
	r.expediteSection(p)
	var stopped []string
	for _, res := range r.results {
		for i, u := range res.undelivered {
			if i == maxListed {
				stopped = append(stopped, fmt.Sprintf("- %s: … and %d more", res.scenario.name, len(res.undelivered)-i))
				break
			}
			stopped = append(stopped, fmt.Sprintf("- %s: %s", res.scenario.name, u))
		}
	}
	if len(stopped) > 0 {
		p("### Deliveries that ended unknown or failed\n\n%s\n\n", strings.Join(stopped, "\n"))
	}
	p("### The faults, and /readyz and /metrics meanwhile\n\nEach replica was asked every 250 ms, with a 3 s timeout (status×count; none: no answer in time).\n\n")
	p("| scenario | fault | /readyz | /metrics |\n|---|---|---|---|\n")
	for _, res := range r.results {
		p("| %s | %s | %s | %s |\n", res.scenario.name, res.scenario.what, res.readyz, res.metrics)
	}
	p("\n### What the replicas did with the keys\n\nThe idempotency outcomes of the load's creates, from the replicas' logs (written, completed on the one-phase path or claimed on the two-phase path, and replayed: the ordinary ones; the rest: what the fault made happen).\n\n")
	p("| scenario | written | replayed | others |\n|---|---:|---:|---|\n")
	for _, res := range r.results {
		var others []string
		for _, k := range slices.Sorted(maps.Keys(res.outcomes)) {
			if k != "completed" && k != "claimed" && k != "replayed" {
				others = append(others, fmt.Sprintf("%s %d", k, res.outcomes[k]))
			}
		}
		p("| %s | %d | %d | %s |\n", res.scenario.name, res.outcomes["completed"]+res.outcomes["claimed"], res.outcomes["replayed"], orNone(strings.Join(others, ", ")))
	}
	p("\n### Timelines\n\nThe answers the clients got to their creates, per %s (attempt by attempt: a first 201, a replayed 201, a 409 in progress, a 5xx, no answer), "+
		"with the fault's start and end.\n\n", timelineBin)
	for _, res := range r.results {
		p("![%s: answers per %s](%s)\n\n", res.scenario.name, timelineBin, chartFile(res.scenario.name))
	}
	if fs := r.failures(); len(fs) > 0 {
		p("\n### Failed checks\n\n")
		for _, f := range fs {
			p("- %s\n", f)
		}
	}
	p("\n")
	return b.String()
}

// expediteSection is the report's part on the expedites (expedite.go).
func (r *report) expediteSection(p func(string, ...any)) {
	p("### Expedites\n\nBeside the creates, %d expediters each create a request and expedite it (`POST /v1/demo-requests/{id}/expedite`: the order, "+
		"a slot at the desk, a charge at the desk, the 201), at most one every %s each, through the same client and replica moves; "+
		"the desk starts the account with %d credits, so no refusal is for want of credit. After the load the checks give the runs %s to settle "+
		"(the completer takes a parked or abandoned run once its lease passes), then check them in SQL and at the desk.\n\n",
		expediters, expediteEvery, deskCredit, runsSettleFor)
	p("| scenario | sent | client saw the 201 / no answer (sent again) | confirmed / refused / needing attention | duplicated effects | lost acks | at the desk: slots / charges / releases | account debited (charges × %d) | 409 / 5xx and no answer (attempts) | all settled after |\n", xp.ExpediteAmount)
	p("|---|---:|---|---|---:|---:|---|---|---|---:|\n")
	for _, res := range r.results {
		x := res.ex
		var fivexx []string
		for _, k := range slices.Sorted(maps.Keys(x.statuses)) {
			if k != "409" {
				fivexx = append(fivexx, fmt.Sprintf("%s: %d", k, x.statuses[k]))
			}
		}
		refused := fmt.Sprint(x.refused)
		if len(x.refusals) > 0 {
			var codes []string
			for _, k := range slices.Sorted(maps.Keys(x.refusals)) {
				codes = append(codes, fmt.Sprintf("%s %d", k, x.refusals[k]))
			}
			refused += " (" + strings.Join(codes, ", ") + ")"
		}
		account := fmt.Sprintf("%d for %d charges", x.debited, x.chargedAll)
		if x.attentionChargedAll > 0 {
			account += fmt.Sprintf(" (%d of runs needing attention)", x.attentionChargedAll)
		}
		p("| %s | %d | %d / %d (%d) | %d / %s / %d | %d | %d | %d / %d / %d | %s | %d / %s | %s |\n",
			res.scenario.name, x.sent, x.acked, x.unknown, x.sentAgain, x.confirmed, refused, x.attention, x.duplicates, x.lostAcks,
			x.slots, x.charges, x.releases, account, x.statuses["409"], orNone(strings.Join(fivexx, ", ")), x.settled.Round(100*time.Millisecond))
	}
	p("\n\"Duplicated effects\": a second slot or a second charge at the desk for one request. \"Lost acks\": a 201 a client saw whose order is not "+
		"`confirmed` with the answer's slot and charge references. The account is the campaign's one, so far: its debit must be %d for each charge the desk holds, "+
		"and each charge must be of a confirmed order (or of a run that needs attention, listed below). \"All settled after\" runs from the checks' start "+
		"to the last run completed or needing attention; one still running after %s fails the scenario.\n\n", xp.ExpediteAmount, runsSettleFor)
	p("#### A cancel and an expedite\n\nEvery other expedited request is also cancelled at the same moment, on the other replica (docs/steps.md, " +
		"\"A cancel and an expedite\"). Exactly one may win; a cancelled request keeps no charge and no held slot at the desk, and the desk " +
		"holds no submission of it that is not cancelled there too. A submission the desk accepted after the cancel committed was in flight " +
		"when it did, taken by a dispatcher before it (no attempt taken after it sends); the cancel at the desk follows it. The longest 409 after the heal is the step-wise path's, " +
		"for the expedites: from the heal (or a later first 409) to a definite answer, owner alive / owner died.\n\n")
	p("| scenario | races | cancel won / expedite won / both | charges kept on cancelled | slots held on cancelled | live submissions of cancelled | accepted after the cancel (in flight) | longest 409 after the heal |\n")
	p("|---|---:|---|---:|---:|---:|---:|---|\n")
	for _, res := range r.results {
		x := res.ex
		p("| %s | %d | %d / %d / %d | %d | %d | %d | %d | %s / %s |\n", res.scenario.name, x.raced, x.cancelWon, x.expediteWon, x.bothWon,
			x.chargesKept, x.slotsHeld, x.liveSubmissions, x.submittedAfterCancel,
			x.blockedAfterHeal[0].Round(100*time.Millisecond), x.blockedAfterHeal[1].Round(100*time.Millisecond))
	}
	p("\n")
	var attention []string
	for _, res := range r.results {
		for i, a := range res.ex.needingAttention {
			if i == maxListed {
				attention = append(attention, fmt.Sprintf("- %s: … and %d more", res.scenario.name, len(res.ex.needingAttention)-i))
				break
			}
			attention = append(attention, fmt.Sprintf("- %s: %s", res.scenario.name, a))
		}
	}
	if len(attention) > 0 {
		p("#### Runs that need attention\n\nA run past its limit (8 turns or 10 minutes) keeps its key and waits for an operator (docs/steps.md, \"Needs attention\"):\n\n%s\n\n", strings.Join(attention, "\n"))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func recovery(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return d.Round(time.Millisecond).String()
}

// Markers of the generated part of docs/chaos.md.
const (
	beginMarker = "<!-- demo-chaos:begin (written by make chaos; edit outside the markers) -->"
	endMarker   = "<!-- demo-chaos:end -->"
)

// writeSection replaces what lies between the markers of path with md.
func writeSection(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the markers %q and %q", path, beginMarker, endMarker)
	}
	return os.WriteFile(path, []byte(s[:i+len(beginMarker)]+"\n"+md+s[j:]), 0o644)
}

// maxListed is how many stopped deliveries the report lists per scenario.
const maxListed = 5

// readyGrace is how far from the failover's edges /readyz may be either
// answer: a probe asked just before the crash, or just before the new
// primary's first answer, may be answered either way.
const readyGrace = time.Second

// failoverFigures are a failover scenario's measures (failover.go).
type failoverFigures struct {
	sync                   bool
	syncNames              string // the primary's synchronous_standby_names before the crash
	oldPrimary, newPrimary string
	source                 string
	promoted               time.Duration // crash → the monitor's new primary
	firstSuccess           time.Duration // crash → the first 201 to an attempt sent after it
	firstReady             time.Duration // crash → the first /readyz 200 to a probe asked after it
	readyWhileDown         int           // /readyz 200s with no primary taking writes
	notReadyWhileDown      int
	notReadyAfter          int // /readyz not 200 from 3 s after the first 201
}

// failoverSection is the report's part on the failover scenarios.
func (r *report) failoverSection(p func(string, ...any)) {
	var fos []*result
	for _, res := range r.results {
		if res.fo != nil {
			fos = append(fos, res)
		}
	}
	if len(fos) == 0 {
		return
	}
	p("### Failovers\n\nThe replicas on a pg_auto_failover formation (%s; a monitor, a primary and a standby, on 127.0.0.1; the monitor's checks tightened to fail over in about ten seconds: "+
		"a health check every second, a node unhealthy after 4 s without news of its keeper, 6 s for a lost primary to demote itself), "+
		"their `DATABASE_URL` the formation's multi-host URL as `pg_autoctl show uri` prints it. Under the load, the primary crashes: every process of the node "+
		"(keeper, postmaster, backends) stopped, then killed. \"Lost acks\": creates a client saw answered 201 whose row the new primary does not hold; "+
		"\"ran again\": of them, those whose retry with the same key (the checks' replay) was answered 201 as a first request, a second effect; "+
		"\"at the desk\": their deliveries the desk holds, of requests that no longer exist. "+
		"/readyz is judged from %s after the crash to %s before the first 201 (no primary takes writes: 200 is a lie) and from 3 s after that first 201 (anything but 200 is).\n\n",
		fos[0].fo.source, readyGrace, readyGrace)
	p("| scenario | replication at the crash | crashed → promoted | crash → new primary (monitor) | crash → first 201 | duplicates | lost acks | ran again | at the desk | /readyz: 200 / not 200 with no primary | /readyz not 200 after | crash → first /readyz 200 |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, res := range fos {
		fo := res.fo
		repl := fmt.Sprintf("synchronous (`%s`)", fo.syncNames)
		if !fo.sync {
			repl = fmt.Sprintf("asynchronous (`%s`)", fo.syncNames)
		}
		p("| %s | %s | %s → %s | %s | %s | %d | %d | %d | %d | %d / %d | %d | %s |\n", res.scenario.name, repl, fo.oldPrimary, fo.newPrimary,
			fo.promoted.Round(100*time.Millisecond), recovery(fo.firstSuccess), res.duplicates, res.lostAcks, res.secondEffects, res.lostDelivered,
			fo.readyWhileDown, fo.notReadyWhileDown, fo.notReadyAfter, recovery(fo.firstReady))
	}
	var effects []string
	for _, res := range fos {
		for i, f := range res.lossEffects {
			if i == maxListed {
				effects = append(effects, fmt.Sprintf("- %s: … and %d more", res.scenario.name, len(res.lossEffects)-i))
				break
			}
			effects = append(effects, fmt.Sprintf("- %s: %s", res.scenario.name, f))
		}
	}
	if len(effects) > 0 {
		p("\nWhat the lost acknowledgements did to the checks (reported, not failed: the scenario replicates asynchronously on purpose):\n\n%s\n", strings.Join(effects, "\n"))
	}
	p("\n")
}

// floodSection is the report's line on the flood (flood.go).
func (r *report) floodSection(p func(string, ...any)) {
	for _, res := range r.results {
		f := res.flood
		if f == nil {
			continue
		}
		p("### A flood of new keys\n\n%s: %d creates of a second actor, each its own key, in %s (bound %d a second, burst %d, per actor and replica): "+
			"%d answered 201, %d 429 `rate_limited` (%d without Retry-After), other answers: %s; stored: %d keys and %d business rows "+
			"(the 201s and the storm's one; both buckets allow at most %d in that time). The storm of %d concurrent requests on one fresh key after it: %s, %d key, %d business row. "+
			"The load's actor: 429 × %d.\n\n",
			res.scenario.name, f.sent, f.elapsed.Round(time.Millisecond), floodRate, floodBurst, f.created, f.limited, f.noRetryAfter, counts(f.others),
			f.stored, f.rows, int(2*(floodBurst+floodRate*f.elapsed.Seconds())), stormSize, counts(f.storm), f.stormKeys, f.stormRows,
			res.statuses["429"]+res.ex.statuses["429"])
	}
}

// counts lists the answers of m, e.g. "201 × 150, 409 × 50".
func counts(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s × %d", k, m[k]))
	}
	return orNone(strings.Join(out, ", "))
}
