package demo

import (
	"context"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

type expedites map[string]Expedite

func (es expedites) Expedite(_ context.Context, actor, id string) (Expedite, error) {
	if e, ok := es[id]; ok {
		return e, nil
	}
	return Expedite{}, apperr.Errorf(apperr.NotFound, "no expedite of %q", id)
}

func TestOrderExpedite(t *testing.T) {
	const (
		fresh     = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c01"
		cancelled = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c02"
		ordered   = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c03"
		confirmed = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0c04"
	)
	s := &Service{Store: requests{
		fresh:     {ID: fresh, Actor: "alice", State: StateAccepted},
		cancelled: {ID: cancelled, Actor: "alice", State: StateCancelled},
		ordered:   {ID: ordered, Actor: "alice", State: StateAccepted},
		confirmed: {ID: confirmed, Actor: "alice", State: StateAccepted},
	}}
	es := expedites{
		ordered:   {RequestID: ordered, Key: "k1", State: ExpediteOrdered},
		confirmed: {RequestID: confirmed, Key: "k1", State: ExpediteConfirmed},
	}
	for _, tc := range []struct {
		name, actor, id, key, code string
		recorded                   bool
	}{
		{"an accepted request", "alice", fresh, "k1", "", false},
		{"another actor's", "bob", fresh, "k1", apperr.NotFound, false},
		{"a cancelled one", "alice", cancelled, "k1", apperr.NotExpeditable, false},
		{"ordered under another key", "alice", ordered, "k2", apperr.NotExpeditable, false},
		{"ordered under this key: nothing left to write", "alice", ordered, "k1", "", true},
		{"confirmed under this key, which expired since", "alice", confirmed, "k1", apperr.NotExpeditable, false},
		{"not an id", "alice", "42", "k1", apperr.NotFound, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, recorded, err := s.OrderExpedite(context.Background(), es, tc.actor, tc.id, tc.key, time.Now())
			switch {
			case tc.code != "":
				if apperr.Code(err) != tc.code {
					t.Fatalf("OrderExpedite: %v, want %s", err, tc.code)
				}
			case err != nil || recorded != tc.recorded || e.State != ExpediteOrdered || e.Key != tc.key || e.Amount != ExpediteAmount && !recorded:
				t.Fatalf("OrderExpedite = %+v, %v, %v; want the order under %s (recorded %v)", e, recorded, err, tc.key, tc.recorded)
			}
		})
	}
}
