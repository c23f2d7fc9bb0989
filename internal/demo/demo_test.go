package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		in   CreateInput
		code string // "" when valid
	}{
		{"a topic", CreateInput{Topic: "billing"}, ""},
		{"a topic and a note", CreateInput{Topic: "billing", Note: "call me"}, ""},
		{"empty topic", CreateInput{}, apperr.InvalidField},
		{"spaces only", CreateInput{Topic: " \t\n"}, apperr.InvalidField},
		{"invisible characters only", CreateInput{Topic: "\u200b\u200d\ufeff"}, apperr.InvalidField},
		{"a visible character among invisible ones", CreateInput{Topic: "\u200bx"}, ""},
		{"topic at the limit, in characters", CreateInput{Topic: strings.Repeat("é", MaxTopicLen)}, ""},
		{"topic over the limit", CreateInput{Topic: strings.Repeat("a", MaxTopicLen+1)}, apperr.InvalidField},
		{"note at the limit", CreateInput{Topic: "t", Note: strings.Repeat("ü", MaxNoteLen)}, ""},
		{"note over the limit", CreateInput{Topic: "t", Note: strings.Repeat("a", MaxNoteLen+1)}, apperr.InvalidField},
		{"label over the limit", CreateInput{Topic: "t", ClientLabel: strings.Repeat("a", MaxTopicLen+1)}, apperr.InvalidField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			if tc.code == "" && err != nil || tc.code != "" && apperr.Code(err) != tc.code {
				t.Fatalf("Validate: %v, want code %q", err, tc.code)
			}
		})
	}
}

func TestSignificantLeavesOutTheLabel(t *testing.T) {
	a := CreateInput{Topic: "t", Note: "n", ClientLabel: "retry 2"}.Significant()
	b := CreateInput{Topic: "t", Note: "n"}.Significant()
	if len(a) != 2 || a["topic"] != b["topic"] || a["note"] != b["note"] {
		t.Fatalf("significant fields %v and %v differ", a, b)
	}
}

func TestCreate(t *testing.T) {
	s := &Service{RefusedTopics: map[string]bool{"blocked": true}}
	now := time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	tests := []struct {
		topic string
		code  string
	}{
		{"billing", ""},
		{"blocked", apperr.TopicRefused},
		{"  Blocked ", apperr.TopicRefused}, // case and spaces do not get around the rule
		{"blocked but", ""},
	}
	for _, tc := range tests {
		r, err := s.Create("alice", CreateInput{Topic: tc.topic, Note: "n"}, now)
		if tc.code != "" {
			if apperr.Code(err) != tc.code {
				t.Errorf("Create(%q): %v, want %s", tc.topic, err, tc.code)
			}
			continue
		}
		switch {
		case err != nil:
			t.Errorf("Create(%q): %v", tc.topic, err)
		case !IsID(r.ID) || r.Actor != "alice" || r.State != StateAccepted || r.Topic != tc.topic || r.Note != "n":
			t.Errorf("Create(%q) = %+v", tc.topic, r)
		case !r.CreatedAt.Equal(now.Truncate(time.Microsecond)) || r.CreatedAt.Location() != time.UTC:
			t.Errorf("created at %v, want %v in UTC, to the microsecond as PostgreSQL stores it", r.CreatedAt, now)
		}
	}
}

// requests is a store of requests in memory: Cancel's rules are pure
// decisions on what a read returns.
type requests map[string]Request

func (rs requests) DemoRequest(_ context.Context, actor, id string) (Request, error) {
	r, ok := rs[id]
	if !ok || r.Actor != actor {
		return Request{}, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return r, nil
}

func TestCancel(t *testing.T) {
	const accepted, cancelled = "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0b01", "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0b02"
	s := &Service{Store: requests{
		accepted:  {ID: accepted, Actor: "alice", State: StateAccepted, Delivery: "submitted"},
		cancelled: {ID: cancelled, Actor: "alice", State: StateCancelled},
	}}
	now := time.Now()
	tests := []struct {
		name, actor, id, code string
	}{
		{"an accepted request", "alice", accepted, ""},
		{"another actor's", "bob", accepted, apperr.NotFound},
		{"already cancelled", "alice", cancelled, apperr.NotCancellable},
		{"not an id", "alice", "42", apperr.NotFound},
		{"an id in another form", "alice", strings.ToUpper(accepted), apperr.NotFound},
		{"an unknown id", "alice", "6f1c1f7e-8d5a-4c1e-9a57-0b6c1f6a0b03", apperr.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.Cancel(context.Background(), tc.actor, tc.id, now)
			if tc.code != "" {
				if apperr.Code(err) != tc.code {
					t.Fatalf("Cancel: %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || r.State != StateCancelled || r.CancelledAt == nil || r.Delivery != "" {
				t.Fatalf("Cancel = %+v, %v; want the request cancelled at now, without its delivery", r, err)
			}
		})
	}
}
