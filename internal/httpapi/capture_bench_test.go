package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
)

// Benchmarks of the response capture and of the other pure steps of a
// create: go test -run '^$' -bench . ./internal/httpapi (the package's
// TestMain starts a PostgreSQL, which these do not use).

var sinkResponse idempotency.Response

func benchRequest() demo.Request {
	return demo.Request{
		ID: "4b0d8d1e-7f6a-4c55-9b8e-2f0c8a5d3e11", Actor: "bench", State: demo.StateAccepted,
		Topic: "bench-create", Note: "a demo request filed by the load generator",
		CreatedAt: time.Date(2026, 12, 2, 12, 0, 0, 123456000, time.UTC),
	}
}

// BenchmarkCaptureCreated renders the response a create stores and replays.
func BenchmarkCaptureCreated(b *testing.B) {
	dr := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := renderRequest(http.StatusCreated, dr, map[string]string{"Location": requestURL(dr.ID)})
		if err != nil {
			b.Fatal(err)
		}
		sinkResponse = resp
	}
}

// BenchmarkCaptureRefusal renders a refusal the runner stores (a 422).
func BenchmarkCaptureRefusal(b *testing.B) {
	err := apperr.Errorf(apperr.TopicRefused, "requests on topic %q are not taken here", "blocked")
	b.ReportAllocs()
	for b.Loop() {
		sinkResponse = problem.Render(err)
	}
}

// BenchmarkWriteReplay writes a stored response as a replay.
func BenchmarkWriteReplay(b *testing.B) {
	resp, err := renderRequest(http.StatusCreated, benchRequest(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		writeResponse(w, resp, true)
	}
}

// BenchmarkDecodeCreate decodes and validates a create body.
func BenchmarkDecodeCreate(b *testing.B) {
	sent := []byte(`{"topic":"bench-create","note":"a demo request filed by the load generator"}`)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/demo-requests", bytes.NewReader(sent))
		r.Header.Set("Content-Type", "application/json")
		var in demo.CreateInput
		if err := body.DecodeJSON(httptest.NewRecorder(), r, &in); err != nil {
			b.Fatal(err)
		}
		if err := in.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNoteKey is the key hash the request log carries.
func BenchmarkNoteKey(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/demo-requests", strings.NewReader(""))
	s := idempotency.Scope{Actor: "bench", Operation: "demo-requests.create", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"}
	b.ReportAllocs()
	for b.Loop() {
		accesslog.NoteKey(r, s)
	}
}
