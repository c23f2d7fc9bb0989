package expedite_test

import (
	"context"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
)

type expedites map[string]expedite.Expedite

func (es expedites) Expedite(_ context.Context, actor, id string) (expedite.Expedite, error) {
	if e, ok := es[id]; ok {
		return e, nil
	}
	return expedite.Expedite{}, apperr.Errorf(apperr.NotFound, "no expedite of %q", id)
}

func TestOrder(t *testing.T) {
	const (
		fresh     = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c01"
		cancelled = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c02"
		ordered   = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c03"
		confirmed = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c04"
	)
	s := &demo.Service{Store: requests{
		fresh:     {ID: fresh, Actor: "alice", State: demo.StateAccepted},
		cancelled: {ID: cancelled, Actor: "alice", State: demo.StateCancelled},
		ordered:   {ID: ordered, Actor: "alice", State: demo.StateAccepted},
		confirmed: {ID: confirmed, Actor: "alice", State: demo.StateAccepted},
	}}
	es := expedites{
		ordered:   {RequestID: ordered, Key: "k1", State: expedite.ExpediteOrdered},
		confirmed: {RequestID: confirmed, Key: "k1", State: expedite.ExpediteConfirmed},
	}
	for _, tc := range []struct {
		name, actor, id, key, code string
		recorded                   bool
	}{
		{"an accepted request", "alice", fresh, "k1", "", false},
		{"another actor's", "bob", fresh, "k1", apperr.NotFound, false},
		{"a cancelled one", "alice", cancelled, "k1", expedite.NotExpeditable, false},
		{"ordered under another key", "alice", ordered, "k2", expedite.NotExpeditable, false},
		{"ordered under this key: nothing left to write", "alice", ordered, "k1", "", true},
		{"confirmed under this key, which expired since", "alice", confirmed, "k1", expedite.NotExpeditable, false},
		{"not an id", "alice", "42", "k1", apperr.NotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, recorded, err := expedite.Order(context.Background(), s, es, tc.actor, tc.id, tc.key, time.Now())
			switch {
			case tc.code != "":
				if apperr.Code(err) != tc.code {
					t.Fatalf("Order: %v, want %s", err, tc.code)
				}
			case err != nil || recorded != tc.recorded || e.State != expedite.ExpediteOrdered || e.Key != tc.key || e.Amount != expedite.ExpediteAmount && !recorded:
				t.Fatalf("Order = %+v, %v, %v; want the order under %s (recorded %v)", e, recorded, err, tc.key, tc.recorded)
			}
		})
	}
}

// requests is a demo.Store of the requests by id.
type requests map[string]demo.Request

func (rs requests) DemoRequest(_ context.Context, actor, id string) (demo.Request, error) {
	r, ok := rs[id]
	if !ok || r.Actor != actor {
		return demo.Request{}, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, nil
}

// TestCancelRule: the cancel of a request with an expedite is refused
// while the expedite is unfinished, and once it is confirmed; a refused
// expedite, or none, lets the cancel go ahead; the template's own refusals
// come first.
func TestCancelRule(t *testing.T) {
	const (
		ordered   = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0d01"
		confirmed = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0d02"
		refused   = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0d03"
		none      = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0d04"
		cancelled = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0d05"
	)
	rs := requests{cancelled: {ID: cancelled, Actor: "alice", State: demo.StateCancelled}}
	for _, id := range []string{ordered, confirmed, refused, none} {
		rs[id] = demo.Request{ID: id, Actor: "alice", State: demo.StateAccepted}
	}
	svc := expedite.Service{Service: &demo.Service{Store: rs}, Expedites: expedites{
		ordered:   {RequestID: ordered, State: expedite.ExpediteOrdered},
		confirmed: {RequestID: confirmed, State: expedite.ExpediteConfirmed},
		refused:   {RequestID: refused, State: expedite.ExpediteRefused},
		cancelled: {RequestID: cancelled, State: expedite.ExpediteOrdered},
	}}
	for id, code := range map[string]string{ordered: expedite.BeingExpedited, confirmed: apperr.NotCancellable, refused: "", none: "",
		cancelled: apperr.NotCancellable} {
		r, err := svc.Cancel(context.Background(), "alice", id, time.Now())
		if apperr.Code(err) != code && !(code == "" && err == nil) {
			t.Errorf("the cancel of request %s: %v, want %q", id, err, code)
		}
		if code == "" && r.State != demo.StateCancelled {
			t.Errorf("the cancel of request %s: %+v, want it cancelled", id, r)
		}
	}
}
