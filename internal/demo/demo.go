// Package demo is the business of the service: an actor files a demo request
// on a topic. It decides what a valid request is, which requests are refused,
// and what a created request looks like; it is made safe to retry by the
// idempotency package around it.
package demo

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// OperationCreate names the create operation in idempotency scopes.
const OperationCreate = "demo-requests.create"

// Limits of the fields, in characters.
const (
	MaxTopicLen = 200
	MaxNoteLen  = 4000
)

// Request is a demo request: the business row, and its representation.
type Request struct {
	ID        string    `json:"requestId" db:"id"`
	Actor     string    `json:"-" db:"actor_id"`
	State     string    `json:"state" db:"state"`
	Topic     string    `json:"topic" db:"topic"`
	Note      string    `json:"note" db:"note"`
	CreatedAt time.Time `json:"createdAt" db:"created_at"`
}

// StateAccepted is the state of a request the service took on.
const StateAccepted = "accepted"

// CreateInput is the body of a create.
type CreateInput struct {
	Topic string `json:"topic"`
	Note  string `json:"note"`
	// ClientLabel is display-only: a label the client shows for its own
	// attempt (say "retry 2"). It is checked but is not part of the intent, so
	// it does not change the fingerprint and is not stored.
	ClientLabel string `json:"clientLabel,omitempty"`
}

// Validate checks the input before anything is claimed.
//
// Errors: invalid_field.
func (in CreateInput) Validate() error {
	switch {
	case strings.TrimSpace(in.Topic) == "":
		return apperr.Errorf(apperr.InvalidField, "topic must not be empty")
	case utf8.RuneCountInString(in.Topic) > MaxTopicLen:
		return apperr.Errorf(apperr.InvalidField, "topic must be at most %d characters", MaxTopicLen)
	case utf8.RuneCountInString(in.Note) > MaxNoteLen:
		return apperr.Errorf(apperr.InvalidField, "note must be at most %d characters", MaxNoteLen)
	case utf8.RuneCountInString(in.ClientLabel) > MaxTopicLen:
		return apperr.Errorf(apperr.InvalidField, "clientLabel must be at most %d characters", MaxTopicLen)
	}
	return nil
}

// Significant returns the fields that make two creates the same intent.
func (in CreateInput) Significant() map[string]any {
	return map[string]any{"topic": in.Topic, "note": in.Note}
}

// Store keeps demo requests.
type Store interface {
	// CreateDemoRequest inserts r and completes claim c with resp, atomically.
	// It returns idempotency.ErrLeaseLost, having changed nothing, when the
	// claim was taken over.
	CreateDemoRequest(ctx context.Context, c idempotency.Claim, r Request, resp idempotency.Response) error
	// DemoRequest returns the actor's request id. Errors: not_found.
	DemoRequest(ctx context.Context, actor, id string) (Request, error)
}

// Service creates and reads demo requests.
type Service struct {
	Store Store
	// RefusedTopics are topics the review desk does not take. A refusal is
	// decided after the claim, so it is stored and replayed like a success.
	RefusedTopics map[string]bool
}

// Create creates the request of claim c. respond renders the stored
// response of the created request.
//
// Errors: topic_refused; idempotency.ErrLeaseLost; store errors.
func (s *Service) Create(ctx context.Context, c idempotency.Claim, in CreateInput,
	respond func(Request) (idempotency.Response, error)) (idempotency.Response, error) {
	if s.RefusedTopics[strings.ToLower(strings.TrimSpace(in.Topic))] {
		return idempotency.Response{}, apperr.Errorf(apperr.TopicRefused, "the review desk does not take requests on topic %q", in.Topic)
	}
	r := Request{
		ID:        uuid.NewString(),
		Actor:     c.Scope.Actor,
		State:     StateAccepted,
		Topic:     in.Topic,
		Note:      in.Note,
		CreatedAt: c.Now,
	}
	resp, err := respond(r)
	if err != nil {
		return idempotency.Response{}, err
	}
	if err := s.Store.CreateDemoRequest(ctx, c, r, resp); err != nil {
		return idempotency.Response{}, err
	}
	return resp, nil
}

// Get returns the actor's request id. Errors: not_found.
func (s *Service) Get(ctx context.Context, actor, id string) (Request, error) {
	if u, err := uuid.Parse(id); err != nil || u.String() != id { // only the canonical form is an id
		return Request{}, apperr.Errorf(apperr.NotFound, "no demo request %q", id)
	}
	return s.Store.DemoRequest(ctx, actor, id)
}
