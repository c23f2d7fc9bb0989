package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	xp "github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
)

// The expedite load: beside the creates' workers, a few expediters each
// create a request and then expedite it (POST /v1/demo-requests/{id}/expedite,
// an operation of several steps with two calls to the review desk), each
// with a key of its own, through the same client rules. It is a little
// load, so that every fault also meets runs at each recovery point.
const (
	expediters    = 2
	expediteEvery = 200 * time.Millisecond // at most one expedite per expediter this often
	// runsSettleFor is how long the checks give the scenario's runs, after
	// its load, to finish: the completer (every second in each replica)
	// takes a parked or abandoned run once its lease passes.
	runsSettleFor = 30 * time.Second
	// deskCredit is the desk's starting credit per account: the campaign's
	// single account never runs out, so no refusal is the desk's credit.
	deskCredit = 1_000_000_000
)

// expediter creates a request, then expedites it: the create through a
// worker of the scenario's load (its answers are counted and checked with
// theirs), the expedite through a worker of its own; every other request
// it also cancels, at the same moment, through a third.
type expediter struct{ create, expedite, cancel *worker }

// expedite is one expedite intent as its client saw it; outcome created
// means the client got the 201.
type expedite struct {
	*intent
	requestID  string
	cancel     *intent // the cancel that raced it, if any
	unknown    bool    // its client ended without a definite answer
	sentAgain  bool    // the checks sent it again: it had not run
	orderState string
}

// expediteOrder is what a 201 of an expedite carries.
type expediteOrder struct {
	RequestID       string `json:"requestId"`
	State           string `json:"state"`
	SlotReference   string `json:"slotReference"`
	ChargeReference string `json:"chargeReference"`
}

func orderOf(body []byte) expediteOrder {
	var o expediteOrder
	json.Unmarshal(body, &o)
	return o
}

// expediteFigures are a scenario's expedites as the checks found them.
type expediteFigures struct {
	sent, acked, unknown, sentAgain       int
	confirmed, refused, attention         int
	duplicates, lostAcks                  int
	slots, charges, releases              int // at the desk, for the scenario's requests
	debited, chargedAll, confirmedAll     int // the account, over the campaign so far
	statuses                              map[string]int
	settled                               time.Duration // from the checks' start to the last run settled
	needingAttention                      []string      // key, request, point, turns, last error
	unsettled                             int
	refusals                              map[string]int // by the refusal's code
	attentionCharged, attentionChargedAll int            // needing attention, charged at the desk
	// The rule between a cancel and an expedite: the races, who won each,
	// and what the desk holds for the cancelled requests.
	raced, cancelWon, expediteWon, bothWon int
	chargesKept, slotsHeld                 int              // at the desk, for cancelled requests: must be 0
	liveSubmissions, submittedAfterCancel  int              // likewise; the second, sends in flight as the cancel committed
	blockedAfterHeal                       [2]time.Duration // the expedites' longest 409 after the heal: owner alive, owner died
}

// runRow is an expedite's key and run as the database holds them.
type runRow struct {
	Key         string  `db:"idem_key"`
	KeyState    string  `db:"key_state"`
	Status      *int    `db:"status_code"`
	Body        []byte  `db:"response_body"`
	LeasePassed bool    `db:"lease_passed"`
	RunState    *string `db:"run_state"`
	Point       *string `db:"point"`
	Attempts    *int    `db:"attempts"`
	LastError   *string `db:"last_error"`
}

func (r runRow) run() string {
	if r.RunState == nil {
		return ""
	}
	return *r.RunState
}

// expediteRuns reads the keys and runs of the expedites keys.
func (e *env) expediteRuns(ctx context.Context, keys []string) (map[string]runRow, error) {
	var rows []runRow
	if err := e.db.SelectContext(ctx, &rows, `SELECT k.idem_key, k.state AS key_state, k.status_code, k.response_body,
		coalesce(k.lease_until < now(), false) AS lease_passed, r.state::text AS run_state, r.point, r.attempts, r.last_error
		FROM idempotency_keys k LEFT JOIN runs r USING (actor_id, operation, idem_key)
		WHERE k.actor_id = $1 AND k.operation = $2 AND k.idem_key = ANY($3)`, actor, xp.ExpediteOperation, pq.Array(keys)); err != nil {
		return nil, fmt.Errorf("read the expedites' keys and runs: %w", err)
	}
	out := make(map[string]runRow, len(rows))
	for _, r := range rows {
		out[r.Key] = r
	}
	return out, nil
}

// settleRuns waits, up to runsSettleFor, until every expedite's key is
// completed or its run needs attention. An expedite whose client learnt
// nothing and that never ran (no key, or a key claimed by a runner that
// died before the order, its lease passed) is still the caller's to do,
// and is sent again with its key.
func (e *env) settleRuns(ctx context.Context, res *result, s *worker, keys []string) (map[string]runRow, error) {
	start := time.Now()
	for {
		runs, err := e.expediteRuns(ctx, keys)
		if err != nil {
			return nil, err
		}
		unsettled := 0
		for _, x := range res.expedites {
			r, ok := runs[x.it.Key]
			switch {
			case ok && (r.KeyState == "completed" || r.run() == "needs_attention"):
				continue
			case x.unknown && !x.sentAgain && (!ok || (r.run() == "" && r.LeasePassed)):
				x.sentAgain = true
				s.send(ctx, x.intent, 0)
			}
			unsettled++
		}
		res.ex.settled = time.Since(start)
		if unsettled == 0 || time.Since(start) > runsSettleFor || ctx.Err() != nil {
			return runs, ctx.Err()
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}

// deskEffect is a slot or a charge the desk holds.
type deskEffect struct {
	RequestID string `db:"request_id"`
	Reference string `db:"reference"`
	State     string `db:"state"`
}

// checkExpedites settles the scenario's expedites, then checks them in SQL
// and at the desk: per request at most one slot and one charge (no
// duplicated external effect); every 201 a client saw is a confirmed order
// with the slot and the charge of the answer, which the desk holds (no lost
// acknowledgement); a refusal stored with its order refused, its slot
// released and nothing charged; every run settled, or needing attention
// (reported); and the account debited exactly the amount of each confirmed
// order (and of each charged run that needs attention, reported).
func (e *env) checkExpedites(ctx context.Context, res *result, s *worker) error {
	ex := &res.ex
	ex.refusals = map[string]int{}
	if len(res.expedites) == 0 {
		res.fail("no expedite was sent")
		return nil
	}
	keys := make([]string, len(res.expedites))
	ids := make([]string, len(res.expedites))
	for i, x := range res.expedites {
		keys[i], ids[i] = x.it.Key, x.requestID
	}
	runs, err := e.settleRuns(ctx, res, s, keys)
	if err != nil {
		return err
	}
	var orders []struct {
		RequestID string `db:"request_id"`
		Key       string `db:"idem_key"`
		State     string `db:"state"`
		Slot      string `db:"slot_reference"`
		Charge    string `db:"charge_reference"`
	}
	if err := e.db.SelectContext(ctx, &orders, `SELECT request_id::text, idem_key, state::text,
		coalesce(slot_reference, '') AS slot_reference, coalesce(charge_reference, '') AS charge_reference
		FROM expedites WHERE request_id = ANY($1::uuid[])`, pq.Array(ids)); err != nil {
		return fmt.Errorf("read the orders: %w", err)
	}
	byRequest := map[string]int{}
	for i, o := range orders {
		byRequest[o.RequestID] = i + 1
	}
	slots, charges := map[string][]deskEffect{}, map[string][]deskEffect{}
	for _, q := range []struct {
		sql  string
		into map[string][]deskEffect
	}{
		{`SELECT request_id, reference, state FROM slots WHERE request_id = ANY($1)`, slots},
		{`SELECT request_id, reference, 'charged' AS state FROM charges WHERE request_id = ANY($1)`, charges},
	} {
		var es []deskEffect
		if err := e.deskDB.SelectContext(ctx, &es, q.sql, pq.Array(ids)); err != nil {
			return fmt.Errorf("read the desk's slots and charges: %w", err)
		}
		for _, d := range es {
			q.into[d.RequestID] = append(q.into[d.RequestID], d)
		}
	}
	var requests []struct {
		ID    string `db:"id"`
		State string `db:"state"`
	}
	if err := e.db.SelectContext(ctx, &requests, `SELECT id::text, state FROM demo_requests WHERE id = ANY($1::uuid[])`,
		pq.Array(append(slices.Clone(ids), res.cancelledAlone...))); err != nil {
		return fmt.Errorf("read the requests: %w", err)
	}
	cancelled := map[string]bool{}
	for _, r := range requests {
		cancelled[r.ID] = r.State == demo.StateCancelled
	}
	slotKeys := make([]string, len(ids))
	for i, id := range ids {
		slotKeys[i] = "expedite:" + id + ":slot"
	}
	if err := e.deskDB.GetContext(ctx, &ex.releases, `SELECT count(*) FROM releases WHERE slot_key = ANY($1)`, pq.Array(slotKeys)); err != nil {
		return fmt.Errorf("read the desk's releases: %w", err)
	}

	ex.sent = len(res.expedites)
	for _, x := range res.expedites {
		r, hasKey := runs[x.it.Key]
		var order struct{ State, Slot, Charge string }
		if i := byRequest[x.requestID]; i > 0 {
			o := orders[i-1]
			order.State, order.Slot, order.Charge = o.State, o.Slot, o.Charge
			if o.Key != x.it.Key {
				res.fail("expedite %s (request %s): its order was made under the key %s", x.it.Key, x.requestID, o.Key)
			}
		}
		x.orderState = order.State
		sl, ch := slots[x.requestID], charges[x.requestID]
		ex.slots, ex.charges = ex.slots+len(sl), ex.charges+len(ch)
		if len(sl) > 1 {
			ex.duplicates += len(sl) - 1
			res.fail("expedite %s (request %s): the desk holds %d slots %v", x.it.Key, x.requestID, len(sl), sl)
		}
		if len(ch) > 1 {
			ex.duplicates += len(ch) - 1
			res.fail("expedite %s (request %s): the desk holds %d charges %v", x.it.Key, x.requestID, len(ch), ch)
		}
		if x.unknown {
			ex.unknown++
		}
		if cancelled[x.requestID] {
			for _, c := range ch {
				ex.chargesKept++
				res.fail("expedite %s: request %s is cancelled and the desk holds its charge %s", x.it.Key, x.requestID, c.Reference)
			}
			for _, sl := range sl {
				if sl.State != "released" {
					ex.slotsHeld++
					res.fail("expedite %s: request %s is cancelled and the desk holds its slot %s (%s)", x.it.Key, x.requestID, sl.Reference, sl.State)
				}
			}
		}
		if x.cancel != nil {
			ex.raced++
			e.checkRace(res, x, cancelled[x.requestID], order.State)
		}
		if x.sentAgain {
			ex.sentAgain++
		}
		switch {
		case hasKey && r.run() == "needs_attention":
			ex.attention++
			if len(ch) > 0 {
				ex.attentionCharged++
			}
			ex.needingAttention = append(ex.needingAttention, fmt.Sprintf("%s (request %s): at %q after %d turns: %s",
				x.it.Key, x.requestID, deref(r.Point), deref(r.Attempts), deref(r.LastError)))
		case !hasKey || r.KeyState != "completed":
			ex.unsettled++
			res.fail("expedite %s (request %s): unsettled %s after the scenario: key %q, run %q at %q: %s",
				x.it.Key, x.requestID, runsSettleFor, r.KeyState, r.run(), deref(r.Point), deref(r.LastError))
		case deref(r.Status) == http.StatusCreated:
			ex.confirmed++
			stored := orderOf(r.Body)
			if order.State != xp.ExpediteConfirmed || stored.SlotReference != order.Slot || stored.ChargeReference != order.Charge {
				res.fail("expedite %s (request %s): its key answers 201 with slot %q and charge %q, the order is %q with %q and %q",
					x.it.Key, x.requestID, stored.SlotReference, stored.ChargeReference, order.State, order.Slot, order.Charge)
			}
			if len(sl) != 1 || sl[0].Reference != order.Slot || sl[0].State != "charged" || len(ch) != 1 || ch[0].Reference != order.Charge {
				res.fail("expedite %s (request %s): confirmed with slot %q and charge %q, the desk holds slots %v and charges %v",
					x.it.Key, x.requestID, order.Slot, order.Charge, sl, ch)
			}
		case deref(r.Status) == http.StatusUnprocessableEntity:
			ex.refused++
			var p struct{ Code string }
			json.Unmarshal(r.Body, &p)
			ex.refusals[p.Code]++
			if p.Code != xp.Refused && !(p.Code == xp.NotExpeditable && cancelled[x.requestID]) {
				res.fail("expedite %s (request %s): refused with %s, which no expedite of the campaign should get", x.it.Key, x.requestID, p.Code)
			}
			// Refused by the desk: its order refused, its slot released.
			// Refused by the business (the cancel won): no order, nothing
			// at the desk.
			refusedOrder := order.State == xp.ExpediteRefused || (p.Code == xp.NotExpeditable && order.State == "" && len(sl) == 0)
			if !refusedOrder || len(ch) > 0 || (len(sl) == 1 && sl[0].State != "released") {
				res.fail("expedite %s (request %s): refused, its order is %q, the desk holds slots %v and charges %v",
					x.it.Key, x.requestID, order.State, sl, ch)
			}
		default:
			res.fail("expedite %s (request %s): its key stores %d", x.it.Key, x.requestID, deref(r.Status))
		}
		switch x.outcome {
		case "created":
			ex.acked++
			got := orderOf(x.body)
			if order.State != xp.ExpediteConfirmed || got.SlotReference != order.Slot || got.ChargeReference != order.Charge || got.SlotReference == "" {
				ex.lostAcks++
				res.fail("expedite %s (request %s): the client got a 201 with slot %q and charge %q, the order is %q with %q and %q",
					x.it.Key, x.requestID, got.SlotReference, got.ChargeReference, order.State, order.Slot, order.Charge)
			}
		case "refused":
			if x.refusal != "422 "+xp.Refused && !(x.refusal == "422 "+xp.NotExpeditable && cancelled[x.requestID]) {
				res.fail("expedite %s (request %s): refused with %s", x.it.Key, x.requestID, x.refusal)
			}
		}
	}
	if err := e.checkCancelledSubmissions(ctx, res, cancelled); err != nil {
		return err
	}
	return e.checkAccount(ctx, res)
}

// checkRace checks one race of a cancel and an expedite of a request:
// exactly one of them won (the request cancelled, or its order recorded),
// and the answers their clients got say the same.
func (e *env) checkRace(res *result, x *expedite, cancelled bool, order string) {
	ex := &res.ex
	switch {
	case cancelled && order != "" && order != xp.ExpediteRefused:
		ex.bothWon++
		res.fail("request %s: cancelled, and its expedite %s is %s", x.requestID, x.it.Key, order)
	case cancelled:
		ex.cancelWon++
	case order != "":
		ex.expediteWon++
	}
	c := x.cancel
	switch {
	case c.outcome == "created" && !cancelled:
		res.fail("cancel %s (request %s): the client got a 200, the request is not cancelled", c.it.Key, x.requestID)
	case c.outcome == "refused" && c.refusal != "422 "+xp.BeingExpedited && c.refusal != "422 "+apperr.NotCancellable:
		res.fail("cancel %s (request %s): refused with %s; a cancel that lost to an expedite is 422 %s (or %s, once it is confirmed)",
			c.it.Key, x.requestID, c.refusal, xp.BeingExpedited, apperr.NotCancellable)
	case c.outcome == "refused" && cancelled:
		res.fail("cancel %s (request %s): refused with %s, yet the request is cancelled", c.it.Key, x.requestID, c.refusal)
	}
}

// checkCancelledSubmissions checks what the desk holds of the scenario's
// cancelled requests: no submission it still takes for live (each is
// cancelled there too), and it counts the submissions it accepted after
// the cancel committed: sends in flight at that moment, which the cancel at
// the desk follows. No attempt taken after a cancel commits sends it.
func (e *env) checkCancelledSubmissions(ctx context.Context, res *result, cancelled map[string]bool) error {
	var gone []string
	for id, c := range cancelled {
		if c {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	var held []struct {
		RequestID string    `db:"request_id"`
		Accepted  time.Time `db:"accepted_at"`
		Cancelled bool      `db:"cancelled"`
	}
	if err := e.deskDB.SelectContext(ctx, &held, `SELECT s.request_id, s.accepted_at,
		EXISTS (SELECT 1 FROM cancels c WHERE c.submission_key = s.key) AS cancelled
		FROM submissions s WHERE s.request_id = ANY($1)`, pq.Array(gone)); err != nil {
		return fmt.Errorf("read the desk's submissions of cancelled requests: %w", err)
	}
	var at []struct {
		ID        string    `db:"id"`
		Cancelled time.Time `db:"cancelled_at"`
	}
	if err := e.db.SelectContext(ctx, &at, `SELECT id::text, cancelled_at FROM demo_requests WHERE id = ANY($1::uuid[])`, pq.Array(gone)); err != nil {
		return fmt.Errorf("read the cancel times: %w", err)
	}
	cancelledAt := map[string]time.Time{}
	for _, r := range at {
		cancelledAt[r.ID] = r.Cancelled
	}
	ex := &res.ex
	for _, h := range held {
		if !h.Cancelled {
			ex.liveSubmissions++
			res.fail("request %s is cancelled, and the desk holds its submission with no cancel", h.RequestID)
		}
		if h.Accepted.After(cancelledAt[h.RequestID]) {
			ex.submittedAfterCancel++
		}
	}
	return nil
}

// checkAccount checks the campaign's account at the desk so far: it was
// debited the amount of each charge the desk holds, and each charge is of
// a confirmed order or of a run that needs attention (reported).
func (e *env) checkAccount(ctx context.Context, res *result) error {
	ex := &res.ex
	st, err := deskclient.New(e.desk.url, e.httpClient()).Stats(ctx)
	if err != nil {
		return err
	}
	if credit, ok := st.Credit[actor]; ok {
		ex.debited = deskCredit - credit
	}
	var charged []string
	if err := e.deskDB.SelectContext(ctx, &charged, `SELECT request_id FROM charges WHERE account = $1`, actor); err != nil {
		return fmt.Errorf("read the account's charges: %w", err)
	}
	ex.chargedAll = len(charged)
	var counts struct {
		Confirmed int `db:"confirmed"`
		Attention int `db:"attention"`
		Other     int `db:"other"`
	}
	if err := e.db.GetContext(ctx, &counts, `SELECT
		count(*) FILTER (WHERE e.state = 'confirmed') AS confirmed,
		count(*) FILTER (WHERE e.state <> 'confirmed' AND r.state = 'needs_attention') AS attention,
		count(*) FILTER (WHERE e.state <> 'confirmed' AND r.state IS DISTINCT FROM 'needs_attention') AS other
		FROM unnest($1::uuid[]) AS c (request_id)
		LEFT JOIN expedites e USING (request_id)
		LEFT JOIN runs r ON r.actor_id = e.actor_id AND r.operation = $2 AND r.idem_key = e.idem_key`,
		pq.Array(charged), xp.ExpediteOperation); err != nil {
		return fmt.Errorf("read the orders of the account's charges: %w", err)
	}
	if err := e.db.GetContext(ctx, &ex.confirmedAll, `SELECT count(*) FROM expedites WHERE actor_id = $1 AND state = 'confirmed'`, actor); err != nil {
		return fmt.Errorf("count the confirmed orders: %w", err)
	}
	ex.attentionChargedAll = counts.Attention
	if counts.Other > 0 || counts.Confirmed != ex.confirmedAll {
		res.fail("the desk holds %d charges of the account: %d of confirmed orders (of %d confirmed), %d of runs needing attention, %d of neither",
			len(charged), counts.Confirmed, ex.confirmedAll, counts.Attention, counts.Other)
	}
	if want := xp.ExpediteAmount * len(charged); ex.debited != want || st.Refunds > 0 {
		res.fail("the account was debited %d for %d charges of %d (%d refunds), want %d", ex.debited, len(charged), xp.ExpediteAmount, st.Refunds, want)
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
