// Package demo is the business: an actor files a demo request on a topic,
// and may cancel it. It decides, writes nothing, and knows no keys.
package demo

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/apperr"
)

// Limits of the fields, in characters.
const (
	MaxTopicLen = 200
	MaxNoteLen  = 4000
)

// States of a demo request.
const (
	StateAccepted  = "accepted"  // the service took it on
	StateCancelled = "cancelled" // its owner cancelled it
)

// Request is a demo request: the business row, and its representation.
type Request struct {
	ID          string     `json:"requestId" db:"id"`
	Actor       string     `json:"-" db:"actor_id"`
	State       string     `json:"state" db:"state"`
	Topic       string     `json:"topic" db:"topic"`
	Note        string     `json:"note" db:"note"`
	CreatedAt   time.Time  `json:"createdAt" db:"created_at"`
	CancelledAt *time.Time `json:"cancelledAt,omitempty" db:"cancelled_at"`
	Delivery    string     `json:"delivery,omitempty" db:"delivery"` // its hand-over to the review desk, as a read finds it
}

// CreateInput is the body of a create.
type CreateInput struct {
	Topic       string `json:"topic"`
	Note        string `json:"note"`
	ClientLabel string `json:"clientLabel,omitempty"` // display-only (say "retry 2"): not fingerprinted, not stored
}

// Validate checks the input before anything is claimed. Errors: invalid_field.
func (in CreateInput) Validate() error {
	switch {
	case blank(in.Topic):
		return apperr.Errorf(apperr.InvalidField, "topic must not be empty (or only spaces and invisible characters)")
	case utf8.RuneCountInString(in.Topic) > MaxTopicLen:
		return apperr.Errorf(apperr.InvalidField, "topic must be at most %d characters", MaxTopicLen)
	case utf8.RuneCountInString(in.Note) > MaxNoteLen:
		return apperr.Errorf(apperr.InvalidField, "note must be at most %d characters", MaxNoteLen)
	case utf8.RuneCountInString(in.ClientLabel) > MaxTopicLen:
		return apperr.Errorf(apperr.InvalidField, "clientLabel must be at most %d characters", MaxTopicLen)
	}
	return nil
}

// blank reports whether s has only white space and format characters
// (zero-width spaces, the byte order mark).
func blank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}

// Significant returns the fields that make two creates the same intent.
func (in CreateInput) Significant() map[string]any {
	return map[string]any{"topic": in.Topic, "note": in.Note}
}

// Store reads demo requests.
type Store interface {
	// DemoRequest returns the actor's request id. Errors: not_found.
	DemoRequest(ctx context.Context, actor, id string) (Request, error)
}

// Service decides creates and cancels, and reads requests.
type Service struct {
	Store         Store
	RefusedTopics map[string]bool // topics this service does not take (REFUSED_TOPICS)
}

// Create decides the request that actor files with in at now. Errors:
// topic_refused.
func (s *Service) Create(actor string, in CreateInput, now time.Time) (Request, error) {
	if s.RefusedTopics[strings.ToLower(strings.TrimSpace(in.Topic))] {
		return Request{}, apperr.Errorf(apperr.TopicRefused, "requests on topic %q are not taken here", in.Topic)
	}
	return Request{
		ID:        uuid.NewString(),
		Actor:     actor,
		State:     StateAccepted,
		Topic:     in.Topic,
		Note:      in.Note,
		CreatedAt: now.UTC().Truncate(time.Microsecond), // as PostgreSQL stores it
	}, nil
}

// Cancel decides the cancel of the actor's request id at now; the store's
// write checks it is still accepted. Errors: not_found,
// request_not_cancellable.
func (s *Service) Cancel(ctx context.Context, actor, id string, now time.Time) (Request, error) {
	r, err := s.Get(ctx, actor, id)
	if err != nil {
		return Request{}, err
	}
	if r.State != StateAccepted {
		return Request{}, apperr.Errorf(apperr.NotCancellable, "demo request %s is %s and cannot be cancelled", id, r.State)
	}
	at := now.UTC().Truncate(time.Microsecond)
	r.State, r.CancelledAt = StateCancelled, &at
	r.Delivery = "" // the answer is the request; its delivery has a route of its own
	return r, nil
}

// Get returns the actor's request id. Errors: not_found.
func (s *Service) Get(ctx context.Context, actor, id string) (Request, error) {
	if !IsID(id) {
		return Request{}, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return s.Store.DemoRequest(ctx, actor, id)
}

// IsID reports whether id is a request id: a UUID in its canonical form.
func IsID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}
