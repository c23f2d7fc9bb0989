// Package problem answers errors as RFC 9457 problems (application/problem+json)
// with the machine code beside them: the one place an error becomes a status.
// The codes, their statuses and titles are declared in package apperr.
package problem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// describedBy are the codes whose answers link to their page (the Idempotency-Key draft's).
var describedBy = map[string]bool{apperr.KeyMissing: true, apperr.KeyInvalid: true, apperr.KeyPayloadMismatch: true}

// problem is an RFC 9457 problem body with the machine code beside it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// Public is what a client may see of err: its *apperr.Error, else internal.
// An error the code did not declare for clients (a driver's, a bug) becomes
// a generic 500: its text may hold SQL, hosts or data, and is logged instead.
func Public(err error) *apperr.Error {
	e, ok := errors.AsType[*apperr.Error](err)
	if _, known := apperr.ProblemOf(apperr.Code(err)); !ok || !known || e.Code == apperr.Internal {
		return &apperr.Error{Code: apperr.Internal, Message: "something went wrong on our side"}
	}
	return e
}

// Render is err as a problem to store and send. A refusal is rendered
// before it is stored, so its replay is the same bytes; Retry-After rides on
// the problems that say when to come back (409, 429, 503).
func Render(err error) idempotency.Response {
	e := Public(err)
	p, _ := apperr.ProblemOf(e.Code)
	typ := "/problems/" + e.Code // the RFC 9457 type: the page, served here (Page), that explains the code
	body, _ := json.Marshal(problem{Type: typ, Title: p.Title, Status: p.Status, Detail: e.Message, Code: e.Code})
	h := map[string]string{"Content-Type": "application/problem+json"}
	if e.RetryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds())))
	}
	if describedBy[e.Code] {
		h["Link"] = "<" + typ + `>; rel="describedby"`
	}
	return idempotency.Response{Status: p.Status, Header: h, Body: body}
}

// Write answers err as a problem, logging it once when it is ours (5xx).
// A 4xx is the client's and is not logged as an error: a flood of bad
// requests must not drown the server's own faults. A 503 of a request the
// access log follows is left to the outage's lines (package accesslog).
func Write(logger *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	note := accesslog.Of(r)
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client left: no server error, and no one to answer.
		note.ClientGone = true
		return
	}
	resp, e := Render(err), Public(err)
	switch {
	case resp.Status == http.StatusServiceUnavailable && accesslog.Logged(r):
		note.Unavailable, note.Cause = err, e.Message
	case resp.Status >= 500:
		logger.ErrorContext(r.Context(), "request failed", "err", err, "req_id", accesslog.ReqID(r))
	}
	note.Code = e.Code
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// Page is GET /problems/{code}: the page a problem's type names.
// RFC 9457 makes a problem's type a URI that should explain it; serving the
// page here keeps that true offline, in a workshop room without internet.
func Page(logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := chi.URLParam(r, "code")
		p, ok := apperr.ProblemOf(code)
		if !ok {
			Write(logger, w, r, apperr.Errorf(apperr.NotFound, "no problem %q", code))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html>\n<title>%s</title>\n<h1>%s</h1>\n<p>HTTP %d, code <code>%s</code>.</p>\n<p>%s</p>\n",
			html.EscapeString(p.Title), html.EscapeString(p.Title), p.Status, html.EscapeString(code), html.EscapeString(p.About))
	})
}
