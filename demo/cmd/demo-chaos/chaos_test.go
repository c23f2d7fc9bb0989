package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// TestShortCampaign runs the short campaign (two scenarios: a replica
// SIGKILLed and restarted, the database link cut for 3 s) against the real
// binaries, so that make test keeps the harness working; every check of the
// campaign must pass.
func TestShortCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the desk and two replicas")
	}
	var progress strings.Builder
	rep, err := run(context.Background(), options{short: true, intents: 400, workers: 8}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.results) != 2 {
		t.Fatalf("%d scenarios ran, want 2", len(rep.results))
	}
	for _, res := range rep.results {
		if res.created == 0 || res.replaysChecked != res.intents {
			t.Errorf("%s: %d intents, %d created, %d replays checked: the load or the checks did not run",
				res.scenario.name, res.intents, res.created, res.replaysChecked)
		}
		if res.ex.confirmed == 0 || res.ex.sent != res.ex.confirmed+res.ex.refused+res.ex.attention {
			t.Errorf("%s: %d expedites sent, %d confirmed, %d refused, %d needing attention: the expedites or their checks did not run",
				res.scenario.name, res.ex.sent, res.ex.confirmed, res.ex.refused, res.ex.attention)
		}
	}
	if rep.failed() {
		t.Fatalf("checks failed:\n%s\n%s", strings.Join(rep.failures(), "\n"), rep.markdown())
	}
}

// TestChecksCatchBrokenPromises runs a calm scenario, then breaks in the
// databases each promise the campaign checks — a second business row for
// an intent, a stored answer changed, an acknowledged request gone, a key
// stuck in progress, a desk submission for no request, a second slot and
// charge at the desk for an expedited request (and the account's debit no
// longer its charges'), a confirmed order's charge not the one its client
// got — and requires the
// checks to report every one: a check that cannot fail proves nothing.
func TestChecksCatchBrokenPromises(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, the desk and two replicas")
	}
	ctx := context.Background()
	var progress strings.Builder
	e, err := setUp(ctx, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	defer e.tearDown()
	calm := scenario{name: "calm", what: "nothing breaks", inject: nothing, heal: nothing}
	res, err := e.runScenario(ctx, calm, 1, 40, options{workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.failures) > 0 || res.created < 4 {
		t.Fatalf("the calm scenario: %d created, failures %v", res.created, res.failures)
	}
	var created []*intent
	expedited := map[string]bool{}
	for _, x := range res.expedites {
		expedited[x.requestID] = true
	}
	for _, in := range res.sent {
		if in.outcome == "created" && !expedited[in.requestID] {
			created = append(created, in)
		}
	}
	var confirmed []*expedite
	for _, x := range res.expedites {
		if x.outcome == "created" {
			confirmed = append(confirmed, x)
		}
	}
	if len(confirmed) < 2 {
		t.Fatalf("the calm scenario: %d expedites confirmed, want at least 2", len(confirmed))
	}
	dup, changed, gone := created[0], created[1], created[2]
	charged, moved := confirmed[0], confirmed[1]
	for _, q := range []struct {
		db   *sqlx.DB
		sql  string
		args []any
	}{
		{e.db, `INSERT INTO demo_requests (id, actor_id, topic, note, state, created_at)
			SELECT gen_random_uuid(), actor_id, topic, note, state, created_at FROM demo_requests WHERE id = $1`, []any{dup.requestID}},
		{e.db, `UPDATE idempotency_keys SET response_body = response_body || ' '::bytea WHERE idem_key = $1`, []any{changed.it.Key}},
		{e.db, `DELETE FROM demo_requests WHERE id = $1`, []any{gone.requestID}},
		{e.db, `INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, created_at, expires_at)
			VALUES ($1, 'demo-requests.create', 'stuck-key', 'x', 'in_progress', gen_random_uuid(), now() - interval '1 minute', now(), now() + interval '1 day')`, []any{actor}},
		{e.deskDB, `INSERT INTO submissions (key, fingerprint, request_id, topic, note, reference, accepted_at)
			VALUES ('demo-request:' || $1, 'x', $1, $2, '', 'ref-of-nothing', now())`, []any{"00000000-0000-0000-0000-000000000001", res.topic}},
		{e.deskDB, `INSERT INTO slots (key, fingerprint, request_id, account, reference, accepted_at, hold_until, state)
			VALUES ('second-slot', 'x', $1, $2, 'second-slot-ref', now(), now(), 'charged')`, []any{charged.requestID, actor}},
		{e.deskDB, `INSERT INTO charges (key, fingerprint, request_id, account, amount, slot_key, reference, accepted_at)
			VALUES ('second-charge', 'x', $1, $2, 10, 'second-slot', 'second-charge-ref', now())`, []any{charged.requestID, actor}},
		{e.db, `UPDATE expedites SET charge_reference = 'another-charge' WHERE request_id = $1`, []any{moved.requestID}},
	} {
		if _, err := q.db.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}

	again := &result{scenario: calm, expedites: res.expedites}
	settler, err := e.settler()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.check(ctx, again, res.topic, res.sent, settler); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(again.failures, "\n")
	for _, want := range []string{
		"intent " + dup.it.Key + ": 2 business rows",
		"intent " + changed.it.Key + ": the client got",
		"intent " + changed.it.Key + ": the replay is",
		"intent " + gone.it.Key + ": the client got request " + gone.requestID,
		"keys in progress past their lease",
		"the desk holds submission ref-of-nothing for request 00000000-0000-0000-0000-000000000001, which does not exist",
		"expedite " + charged.it.Key + " (request " + charged.requestID + "): the desk holds 2 slots",
		"expedite " + charged.it.Key + " (request " + charged.requestID + "): the desk holds 2 charges",
		"expedite " + moved.it.Key + " (request " + moved.requestID + "): the client got a 201 with slot",
		"the account was debited",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no failure says %q; the failures:\n%s", want, all)
		}
	}
	if again.duplicates != 1 || again.lostAcks != 1 {
		t.Errorf("%d duplicates and %d lost acknowledgements, want 1 and 1", again.duplicates, again.lostAcks)
	}
	if again.ex.duplicates != 2 || again.ex.lostAcks != 1 {
		t.Errorf("expedites: %d duplicated effects and %d lost acknowledgements, want 2 and 1", again.ex.duplicates, again.ex.lostAcks)
	}
}

// TestTimelineRenders: a scenario's timeline is a well-formed SVG document
// with its answers drawn and the fault marked.
func TestTimelineRenders(t *testing.T) {
	tl := newTimeline()
	tl.start = time.Now().Add(-time.Second)
	for _, status := range []int{201, 201, 409, 503} {
		tl.add(&http.Response{StatusCode: status, Header: http.Header{}}, nil)
	}
	tl.add(&http.Response{StatusCode: 201, Header: http.Header{"Idempotent-Replayed": {"true"}}}, nil)
	tl.add(nil, errors.New("connection refused"))
	tl.add(nil, context.Canceled) // a move to the other replica: not an answer
	tl.mark(&tl.injected)
	tl.mark(&tl.healed)
	for _, kind := range answerKinds {
		if got := tl.bins[kind]; len(got) != 11 || got[10] == 0 {
			t.Errorf("bins of %q: %v, want an answer in the 11th", kind, got)
		}
	}
	b, err := tl.svg("calm")
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the timeline is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	for _, want := range []string{"fault starts", "fault ends", "no answer", "replay"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
}

// TestLossEffectsApart: with asynchronous replication the failures that
// name a create whose acknowledgement was lost (its key or its request)
// are its cost, reported apart; every other failure still fails.
func TestLossEffectsApart(t *testing.T) {
	res := &result{lost: map[string]string{"key-lost": "req-lost"}, failures: []string{
		"intent key-lost: the client got request req-lost, the database has [req-new]",
		"the desk holds submission ref-1 for request req-lost, which does not exist",
		"intent key-other: 2 business rows [a b]",
		"3 keys in progress past their lease and 5s: [x y z]",
	}}
	res.setLossEffectsApart()
	if want := []string{"intent key-other: 2 business rows [a b]", "3 keys in progress past their lease and 5s: [x y z]"}; !slices.Equal(res.failures, want) {
		t.Errorf("failures %q, want %q", res.failures, want)
	}
	if len(res.lossEffects) != 2 {
		t.Errorf("loss effects %q, want the two that name key-lost or req-lost", res.lossEffects)
	}
	calm := &result{failures: []string{"intent k: 2 business rows"}, lost: map[string]string{}}
	calm.setLossEffectsApart()
	if len(calm.failures) != 1 || len(calm.lossEffects) != 0 {
		t.Errorf("with nothing lost, failures %q and effects %q", calm.failures, calm.lossEffects)
	}
}
