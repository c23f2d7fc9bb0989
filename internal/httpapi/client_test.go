package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestTheGoClientSpeaksTheServersAPI: api/client against this server, every
// exchange checked against openapi.yaml (testenv's transport). Its routes,
// its operations' names, the fields it sends and the fields it reads are
// the server's: a create, its replay, its outcome, a cancel and its
// outcome, and a refusal with its code. A client that drifts from the
// server (a route, a field, an operation's name) fails here, in the fast
// tier.
func TestTheGoClientSpeaksTheServersAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := testenv.New(t)
	c, err := client.New(client.Config{BaseURL: e.Srv.URL, Token: testenv.TokenAlice, HTTPClient: e.Client})
	if err != nil {
		t.Fatal(err)
	}

	create, err := client.NewIntent(client.CreateInput{Topic: "topic-client", Note: "note-client"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Send(ctx, create)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	got := first.Request
	if first.Status != http.StatusCreated || first.Replayed || got.RequestID == "" || got.State != "accepted" ||
		got.Topic != "topic-client" || got.Note != "note-client" || got.CreatedAt.IsZero() {
		t.Fatalf("create: %d, replayed %v, %+v; want 201 and the request as sent, accepted", first.Status, first.Replayed, got)
	}
	stored := e.Must(testenv.Req{Method: http.MethodGet, Path: "/v1/demo-requests/" + got.RequestID, Token: testenv.TokenAlice})
	if r := stored.Request(t); stored.Status != http.StatusOK || r.Topic != got.Topic || r.Note != got.Note {
		t.Fatalf("the created request as the server reads it: %d %s; the client read %+v", stored.Status, stored.Body, got)
	}
	again, err := c.Send(ctx, create)
	if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("the create again: %+v, %v; want its replay", again, err)
	}
	if o, err := c.Resolve(ctx, create.Operation, create.Key); err != nil || o.State != "completed" ||
		o.Status != http.StatusCreated || o.ResultID != got.RequestID {
		t.Fatalf("the create's outcome: %+v, %v; want completed, 201, %s", o, err, got.RequestID)
	}

	cancel, err := client.NewCancelIntent(got.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := c.Send(ctx, cancel)
	if err != nil || cancelled.Status != http.StatusOK || cancelled.Request.State != "cancelled" ||
		cancelled.Request.RequestID != got.RequestID || cancelled.Request.CancelledAt == nil {
		t.Fatalf("cancel: %+v, %v; want 200 and the request cancelled", cancelled, err)
	}
	if o, err := c.Resolve(ctx, cancel.Operation, cancel.Key); err != nil || o.State != "completed" || o.ResultID != got.RequestID {
		t.Fatalf("the cancel's outcome: %+v, %v; want completed, %s", o, err, got.RequestID)
	}

	refused, err := client.NewCancelIntent(got.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(ctx, refused)
	if problem, ok := errors.AsType[*client.ProblemError](err); !ok || problem.Code != apperr.NotCancellable {
		t.Fatalf("a second cancel: %v; want the refusal %s", err, apperr.NotCancellable)
	}
}
