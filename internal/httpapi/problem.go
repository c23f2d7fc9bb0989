package httpapi

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
	"strings"

	"github.com/go-chi/chi/v5"

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

// public is what a client may see of err: its *apperr.Error, else internal.
// An error the code did not declare for clients (a driver's, a bug) becomes
// a generic 500: its text may hold SQL, hosts or data, and is logged instead.
func public(err error) *apperr.Error {
	e, ok := errors.AsType[*apperr.Error](err)
	if _, known := apperr.ProblemOf(apperr.Code(err)); !ok || !known || e.Code == apperr.Internal {
		return &apperr.Error{Code: apperr.Internal, Message: "something went wrong on our side"}
	}
	return e
}

// Render is err as a problem to store and send: the one place an error
// becomes a status (declared with its code in package apperr). A refusal is
// rendered before it is stored, so its replay is the same bytes; Retry-After
// rides on the problems that say when to come back (409, 429, 503).
func Render(err error) idempotency.Response {
	e := public(err)
	p, _ := apperr.ProblemOf(e.Code)
	typ := "/problems/" + e.Code // the RFC 9457 type: the page, served here, that explains the code
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

// WriteError writes err as a problem, logging it once when it is ours (5xx).
// A 4xx is the client's and is not logged as an error: a flood of bad
// requests must not drown the server's own faults.
func WriteError(logger *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client left: no server error, and no one to answer.
		info(r).clientGone = true
		return
	}
	resp := Render(err)
	li, counted := r.Context().Value(logInfoKey).(*logInfo)
	switch {
	case resp.Status == http.StatusServiceUnavailable && counted:
		li.unavailable = err // the outage's log counts it (logRequests)
	case resp.Status >= 500:
		logger.ErrorContext(r.Context(), "request failed", "err", err, "req_id", reqID(r))
	}
	info(r).code = public(err).Code
	writeResponse(w, resp, false)
}

// writeResponse writes a stored or fresh response; a replay says so. The
// body is written as stored, byte for byte: a replay is the same answer, not
// a new rendering of it.
func writeResponse(w http.ResponseWriter, resp idempotency.Response, replayed bool) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	// Only a replay carries the header: a client, a log or a test tells a
	// repeated answer from a first one without comparing bodies.
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// handleMethodNotAllowed answers 405 with the Allow header chi would send.
func handleMethodNotAllowed(logger *slog.Logger, routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		WriteError(logger, w, r, apperr.Errorf(apperr.MethodNotAllowed, "method not allowed on this route"))
	}
}

// handleProblemPage is GET /problems/{code}: the page a problem's type names.
// RFC 9457 makes a problem's type a URI that should explain it; serving the
// page here keeps that true offline, in a workshop room without internet.
func handleProblemPage(logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := chi.URLParam(r, "code")
		p, ok := apperr.ProblemOf(code)
		if !ok {
			WriteError(logger, w, r, apperr.Errorf(apperr.NotFound, "no problem %q", code))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html>\n<title>%s</title>\n<h1>%s</h1>\n<p>HTTP %d, code <code>%s</code>.</p>\n<p>%s</p>\n",
			html.EscapeString(p.Title), html.EscapeString(p.Title), p.Status, html.EscapeString(code), html.EscapeString(p.About))
	})
}
