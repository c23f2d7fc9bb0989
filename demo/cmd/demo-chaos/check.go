package main

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/api/client"
)

// How long the checks wait for the service to settle after a scenario.
const (
	settleFor = lease + 15*time.Second // an unknown outcome to become definite
	stuckFor  = 5 * time.Second        // a key in progress past its lease
	drainFor  = 60 * time.Second       // the outbox to drain
)

// check settles the intents whose outcome the clients did not learn, then
// checks the scenario's intents (their topic is topic) against the
// business rows, the keys, a replay of each, the outbox and the desk, then
// its expedites (res.expedites) in SQL and at the desk.
func (e *env) check(ctx context.Context, res *result, topic string, intents []*intent, settler *worker) error {
	res.intents = len(intents)
	if res.lost == nil {
		res.lost = map[string]string{}
	}
	if len(intents) == 0 {
		res.fail("no intent was sent")
		return nil
	}
	for _, in := range intents {
		if in.hops > 0 {
			res.hops++
		}
		switch in.outcome {
		case "created":
			res.created++
		case "refused":
			res.refused++
			res.fail("intent %s: refused with %s, a definite answer no intent of the campaign should get", in.it.Key, in.refusal)
		case "unknown":
			res.unknown++
			if err := e.settle(ctx, res, in, settler); err != nil {
				return err
			}
		}
	}
	// The load's actor stays below the bound on new keys in every scenario
	// (its client would retry a 429 and hide it: the tally counts them).
	if n := res.statuses["429"] + res.ex.statuses["429"]; n > 0 {
		res.fail("the load's actor was answered 429 %d times: it met the bound on new keys", n)
	}
	if err := e.checkRows(ctx, res, topic, intents); err != nil {
		return err
	}
	if err := e.checkReplays(ctx, res, intents); err != nil {
		return err
	}
	if err := e.checkOutbox(ctx, res, topic); err != nil {
		return err
	}
	return e.checkExpedites(ctx, res, settler)
}

// settle asks the outcome route, on either replica, what became of an
// intent whose outcome is unknown, until it is completed, never happened,
// or in progress with no lease left; one that never happened, or whose
// lease passed with nobody to finish it, is still the caller's to do, and
// is sent again with its key.
func (e *env) settle(ctx context.Context, res *result, in *intent, s *worker) error {
	deadline := time.Now().Add(settleFor)
	for n := 0; ; n++ {
		o, err := s.clients[n%2].Resolve(ctx, in.it.Operation, in.it.Key)
		switch {
		case err == nil && o.State == "completed":
			res.resolvedCompleted++
			if o.Status != http.StatusCreated {
				res.fail("intent %s: the outcome route says completed with %d, not 201", in.it.Key, o.Status)
			}
			return nil
		case err == nil && o.State == "unknown":
			res.resolvedNever++
			s.send(ctx, in, n%2)
			if in.outcome != "created" {
				res.fail("intent %s: never happened, and sent again it is %s %s", in.it.Key, in.outcome, in.refusal)
			}
			return nil
		case err == nil && o.State == "in_progress" && o.LeaseRemainingSeconds == 0 && n > 0:
			// Its owner is gone or gave up, and its release did not reach
			// the database before the lease ended (a link cut longer than
			// the lease): the key is free to take over, and the intent is
			// still the caller's. Sent again with its key, it runs.
			res.resolvedLeasePassed++
			s.send(ctx, in, n%2)
			if in.outcome != "created" {
				res.fail("intent %s: in progress past its lease, and sent again it is %s %s", in.it.Key, in.outcome, in.refusal)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			res.fail("intent %s: outcome still %q (%v) %s after the scenario", in.it.Key, o.State, err, settleFor)
			return nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// keyRow is an intent's key as the database holds it.
type keyRow struct {
	Key      string         `db:"idem_key"`
	State    string         `db:"state"`
	Status   sql.NullInt64  `db:"status_code"`
	ResultID sql.NullString `db:"result_id"`
	Body     []byte         `db:"response_body"`
}

// checkRows checks that every intent has exactly one business row (found
// by its note, unique in the campaign), that its key is completed with 201
// and points at that row, that a client that saw success got that row's
// id and the bytes stored, and that no key is in progress past its lease.
func (e *env) checkRows(ctx context.Context, res *result, topic string, intents []*intent) error {
	var rows []struct {
		Note string `db:"note"`
		ID   string `db:"id"`
	}
	if err := e.db.SelectContext(ctx, &rows, `SELECT note, id::text AS id FROM demo_requests WHERE actor_id = $1 AND topic = $2`, actor, topic); err != nil {
		return fmt.Errorf("read the business rows: %w", err)
	}
	byNote := map[string][]string{}
	for _, r := range rows {
		byNote[r.Note] = append(byNote[r.Note], r.ID)
	}
	keys := make([]string, len(intents))
	for i, in := range intents {
		keys[i] = in.it.Key
	}
	var krs []keyRow
	if err := e.db.SelectContext(ctx, &krs, `SELECT idem_key, state, status_code, result_id, response_body FROM idempotency_keys
		WHERE actor_id = $1 AND operation = $2 AND idem_key = ANY($3)`, actor, client.OperationCreate, pq.Array(keys)); err != nil {
		return fmt.Errorf("read the keys: %w", err)
	}
	byKey := map[string]keyRow{}
	for _, k := range krs {
		byKey[k.Key] = k
	}

	notes := map[string]bool{}
	for _, in := range intents {
		notes[in.note] = true
		ids, k := byNote[in.note], byKey[in.it.Key]
		if len(ids) > 1 {
			res.duplicates += len(ids) - 1
			res.fail("intent %s: %d business rows %v", in.it.Key, len(ids), ids)
		}
		if in.outcome == "created" && !slices.Contains(ids, in.requestID) {
			res.lostAcks++
			res.lost[in.it.Key] = in.requestID
			res.fail("intent %s: the client got request %s, the database has %v", in.it.Key, in.requestID, ids)
		}
		switch {
		case len(ids) == 0:
			res.fail("intent %s (%s): no business row", in.it.Key, in.outcome)
		case k.State != "completed" || k.Status.Int64 != http.StatusCreated || !slices.Contains(ids, k.ResultID.String):
			res.fail("intent %s: its key is %q %d → %q, its rows %v", in.it.Key, k.State, k.Status.Int64, k.ResultID.String, ids)
		case in.outcome == "created" && !bytes.Equal(in.body, k.Body):
			res.fail("intent %s: the client got %q, the key stores %q", in.it.Key, in.body, k.Body)
		}
	}
	for note, ids := range byNote {
		if !notes[note] {
			res.duplicates += len(ids)
			res.fail("business rows %v of no intent (note %q)", ids, note)
		}
	}

	var stuck []string
	if err := e.db.SelectContext(ctx, &stuck, `SELECT idem_key FROM idempotency_keys
		WHERE actor_id = $1 AND state = 'in_progress' AND lease_until < now() - $2 * interval '1 second'`,
		actor, stuckFor.Seconds()); err != nil {
		return fmt.Errorf("read the stuck keys: %w", err)
	}
	if len(stuck) > 0 {
		res.fail("%d keys in progress past their lease and %s: %v", len(stuck), stuckFor, stuck)
	}
	return nil
}

// checkReplays sends every intent again, as it was, and checks that the
// answer is a replay of the bytes the client first got (or, for an intent
// whose client never got them, of the bytes stored).
func (e *env) checkReplays(ctx context.Context, res *result, intents []*intent) error {
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan *intent)
	for range 8 {
		wg.Go(func() {
			for in := range next {
				want := in.body
				if want == nil {
					if err := e.db.GetContext(ctx, &want, `SELECT response_body FROM idempotency_keys
						WHERE actor_id = $1 AND operation = $2 AND idem_key = $3`, actor, in.it.Operation, in.it.Key); err != nil {
						want = nil
					}
				}
				body, status, replayed, err := e.replay(ctx, in)
				mu.Lock()
				switch {
				case err != nil:
					firstErr = cmp.Or(firstErr, err)
				case status != http.StatusCreated || !replayed || want == nil || !bytes.Equal(body, want):
					res.replaysChecked++
					if _, lost := res.lost[in.it.Key]; lost && status == http.StatusCreated && !replayed {
						res.secondEffects++ // its acknowledged create was lost: sent again, it ran again
					}
					res.fail("intent %s: the replay is %d (replayed %t) %q, not %q", in.it.Key, status, replayed, body, want)
				default:
					res.replaysChecked++
					res.replaysIdentical++
				}
				mu.Unlock()
			}
		})
	}
	for _, in := range intents {
		next <- in
	}
	close(next)
	wg.Wait()
	return firstErr
}

// replay sends the intent again as it was, on either replica until one
// answers below 500, and returns the answer.
func (e *env) replay(ctx context.Context, in *intent) (body []byte, status int, replayed bool, err error) {
	for n := 0; ; n++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.replicas[n%2].url+"/v1/demo-requests", bytes.NewReader(in.it.Body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", in.it.Key)
		resp, err := e.httpClient().Do(req)
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode < 500 {
				return body, resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", nil
			}
		}
		if n == 20 {
			return nil, 0, false, fmt.Errorf("replay of %s: no answer below 500 after 20 tries: %v", in.it.Key, err)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

func (e *env) httpClient() *http.Client {
	return &http.Client{Transport: e.transport, Timeout: 10 * time.Second}
}

// delivery is one of the scenario's outbox rows.
type delivery struct {
	ID        string `db:"id"`
	State     string `db:"state"`
	Reference string `db:"reference"`
	LastError string `db:"last_error"`
	Cancelled bool   `db:"cancelled"` // its request was cancelled: withdrawn is a right end
}

// checkOutbox waits for the scenario's outbox rows to drain; lists those
// that ended unknown or failed (a failure unless the desk misbehaved) and
// reconciles them; then checks each row against the desk: the desk holds
// one submission per request, under the request's key, with the reference
// the row recorded, and nothing for a request that does not exist.
func (e *env) checkOutbox(ctx context.Context, res *result, topic string) error {
	if err := e.drain(ctx, res, topic); err != nil {
		return err
	}
	ds, err := e.deliveries(ctx, topic)
	if err != nil {
		return err
	}
	res.deliveries = map[string]int{}
	var stopped []delivery
	for _, d := range ds {
		res.deliveries[d.State]++
		if d.State == "unknown" || d.State == "failed" {
			stopped = append(stopped, d)
			res.undelivered = append(res.undelivered, fmt.Sprintf("%s %s: %s", d.ID, d.State, d.LastError))
		}
	}
	if len(stopped) > 0 && !res.scenario.deskFault {
		res.fail("%d deliveries unknown or failed although the desk was healthy", len(stopped))
	}

	// Reconcile asks the desk and records what it says: submitted, or back
	// in the queue to be sent once.
	for _, d := range stopped {
		if err := e.reconcile(ctx, d.ID); err != nil {
			res.fail("reconcile %s: %v", d.ID, err)
		}
	}
	if len(stopped) > 0 {
		if err := e.drain(ctx, res, topic); err != nil {
			return err
		}
		if ds, err = e.deliveries(ctx, topic); err != nil {
			return err
		}
		after := map[string]string{}
		for _, d := range ds {
			after[d.ID] = d.State
		}
		for _, d := range stopped {
			if after[d.ID] == "submitted" || (d.Cancelled && after[d.ID] == "withdrawn") {
				res.reconciled++
			} else {
				res.fail("delivery %s: %s after the reconcile", d.ID, after[d.ID])
			}
		}
	}

	// A cancel whose attempts ran out (the desk took none for long) is
	// reconciled the same way: asked, and sent again if the desk never got it.
	var cancels []string
	if err := e.db.SelectContext(ctx, &cancels, `SELECT o.request_id::text FROM outbox o JOIN demo_requests r ON r.id = o.request_id
		WHERE r.topic = $1 AND o.kind = 'cancel' AND o.state = 'unknown'`, topic); err != nil {
		return fmt.Errorf("read the cancels that ended unknown: %w", err)
	}
	for _, id := range cancels {
		res.undelivered = append(res.undelivered, id+" cancel unknown")
		if err := e.reconcile(ctx, id); err != nil {
			res.fail("reconcile the cancel of %s: %v", id, err)
		}
	}
	if len(cancels) > 0 {
		if !res.scenario.deskFault {
			res.fail("%d cancels unknown although the desk was healthy", len(cancels))
		}
		if err := e.drain(ctx, res, topic); err != nil {
			return err
		}
		var left int
		if err := e.db.GetContext(ctx, &left, `SELECT count(*) FROM outbox o JOIN demo_requests r ON r.id = o.request_id
			WHERE r.topic = $1 AND o.kind = 'cancel' AND o.state <> 'submitted'`, topic); err != nil {
			return err
		}
		if left > 0 {
			res.fail("%d cancels not submitted after the reconcile", left)
		}
		res.reconciled += len(cancels) - left
	}

	var requests []string
	if err := e.db.SelectContext(ctx, &requests, `SELECT id::text FROM demo_requests WHERE actor_id = $1 AND topic = $2`, actor, topic); err != nil {
		return err
	}
	if len(ds) != len(requests) {
		res.fail("%d outbox rows for %d requests", len(ds), len(requests))
	}
	var held []struct {
		Key       string `db:"key"`
		RequestID string `db:"request_id"`
		Reference string `db:"reference"`
	}
	if err := e.deskDB.SelectContext(ctx, &held, `SELECT key, request_id, reference FROM submissions WHERE topic = $1`, topic); err != nil {
		return fmt.Errorf("read the desk's submissions: %w", err)
	}
	res.deskSubmissions = len(held)
	lostIDs := map[string]bool{}
	for _, id := range res.lost {
		lostIDs[id] = true
	}
	exists := map[string]bool{}
	for _, id := range requests {
		exists[id] = true
	}
	desk := map[string][]string{} // request id → references
	for _, h := range held {
		desk[h.RequestID] = append(desk[h.RequestID], h.Reference)
		switch {
		case !exists[h.RequestID]:
			if lostIDs[h.RequestID] {
				res.lostDelivered++
			}
			res.fail("the desk holds submission %s for request %s, which does not exist", h.Reference, h.RequestID)
		case h.Key != "demo-request:"+h.RequestID:
			res.fail("the desk holds request %s under the key %q", h.RequestID, h.Key)
		}
	}
	for id, refs := range desk {
		if len(refs) > 1 {
			res.fail("the desk holds %d submissions for request %s: %v", len(refs), id, refs)
		}
	}
	for _, d := range ds {
		refs := desk[d.ID]
		switch {
		case d.State == "submitted" && (len(refs) != 1 || refs[0] != d.Reference):
			res.fail("request %s is submitted with reference %s, the desk holds %v", d.ID, d.Reference, refs)
		case d.State != "submitted" && len(refs) > 0:
			res.fail("request %s is %s, but the desk holds %v", d.ID, d.State, refs)
		}
	}
	return nil
}

// drain waits until none of the scenario's outbox rows is pending.
func (e *env) drain(ctx context.Context, res *result, topic string) error {
	deadline := time.Now().Add(drainFor)
	for {
		var pending int
		if err := e.db.GetContext(ctx, &pending, `SELECT count(*) FROM outbox o JOIN demo_requests r ON r.id = o.request_id
			WHERE r.topic = $1 AND o.state = 'pending'`, topic); err != nil {
			return fmt.Errorf("count the pending deliveries: %w", err)
		}
		switch {
		case pending == 0:
			return nil
		case time.Now().After(deadline):
			res.fail("%d deliveries still pending %s after the scenario", pending, drainFor)
			return nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

func (e *env) deliveries(ctx context.Context, topic string) ([]delivery, error) {
	var ds []delivery
	err := e.db.SelectContext(ctx, &ds, `SELECT o.request_id::text AS id, o.state, coalesce(o.provider_reference, '') AS reference,
		coalesce(o.last_error, '') AS last_error, r.state = 'cancelled' AS cancelled
		FROM outbox o JOIN demo_requests r ON r.id = o.request_id WHERE r.topic = $1 AND o.kind = 'submit' ORDER BY o.request_id`, topic)
	if err != nil {
		return nil, fmt.Errorf("read the deliveries: %w", err)
	}
	return ds, nil
}

// reconcile asks a replica to reconcile request id's delivery, until one
// answers 200.
func (e *env) reconcile(ctx context.Context, id string) error {
	var last string
	for n := range 20 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.replicas[n%2].url+"/v1/demo-requests/"+id+"/delivery/reconcile", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := e.httpClient().Do(req)
		if err != nil {
			last = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return fmt.Errorf("no 200 in 20 tries; last: %s", last)
}
