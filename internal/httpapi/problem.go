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

// problems maps every machine code to its HTTP status, title and an
// explanation. It is the one place where an error becomes a status, and the
// source of the pages at /problems/{code} that each problem's type names.
var problems = map[string]struct {
	status int
	title  string
	about  string
}{
	apperr.KeyMissing: {http.StatusBadRequest, "Idempotency-Key header missing",
		"This operation needs an Idempotency-Key header: 1 to 255 visible ASCII characters, bare (abc) or as a quoted string (\"abc\"). Make one key per intent, before the first attempt, and send the same key with every retry of that intent."},
	apperr.KeyInvalid: {http.StatusBadRequest, "Idempotency-Key header invalid",
		"The Idempotency-Key header was sent more than once, or is not 1 to 255 visible ASCII characters, bare or as a quoted string. Nothing was stored."},
	apperr.InvalidHeader: {http.StatusBadRequest, "Invalid header",
		"A header of the request has a value the service does not accept, for example X-Client-Attempt that is not a whole number from 1 up, or a Workshop-* header with a bad value. Nothing was stored."},
	apperr.MalformedJSON: {http.StatusBadRequest, "Malformed JSON body",
		"The body is not one JSON object of valid UTF-8. Nothing was stored."},
	apperr.UnknownField: {http.StatusBadRequest, "Unknown field in body",
		"The body has a member that is not a field of this request (names are matched exactly). Nothing was stored."},
	apperr.InvalidField: {http.StatusBadRequest, "Invalid field in body",
		"A field has the wrong type, is null, appears twice, or breaks a rule of its own (such as an empty topic). Nothing was stored."},
	apperr.InvalidQuery: {http.StatusBadRequest, "Invalid query parameter",
		"A query parameter has a value the route does not accept."},
	apperr.WorkshopDisabled: {http.StatusBadRequest, "Workshop headers are disabled",
		"The Workshop-* headers reproduce each branch of the contract on demand. They work only when the server runs with WORKSHOP=true."},
	apperr.Unauthorized: {http.StatusUnauthorized, "Missing or unknown bearer token",
		"Send Authorization: Bearer <token> with a token the service knows."},
	apperr.NotFound: {http.StatusNotFound, "Not found",
		"There is no such resource for this actor. Another actor's resources are not found either."},
	apperr.MethodNotAllowed: {http.StatusMethodNotAllowed, "Method not allowed",
		"The route exists, but not with this method; the Allow header lists those it takes."},
	apperr.OperationInProgress: {http.StatusConflict, "Operation in progress",
		"An earlier request with this idempotency key is still being processed, and nothing was run for this one. Send the same request again after Retry-After seconds, or ask the route of the Link rel=\"monitor\" header what became of the key. Send Prefer: wait=N to wait up to N seconds for the answer instead. An answer without Retry-After is about an operation of several steps whose run needs attention: no retry moves it until an operator resumes it, and its detail names the command."},
	apperr.BodyTooLarge: {http.StatusRequestEntityTooLarge, "Body too large",
		"The body is over the service's limit. Nothing was stored."},
	apperr.UnsupportedMediaType: {http.StatusUnsupportedMediaType, "Unsupported media type",
		"Send the body as Content-Type: application/json, in UTF-8. Nothing was stored."},
	apperr.KeyPayloadMismatch: {http.StatusUnprocessableEntity, "Idempotency key reused with a different payload",
		"This idempotency key was already used for a request with different significant fields: a key names one intent. Nothing was run or changed. Make a new key for a new intent; do not retry this request as it is."},
	apperr.TopicRefused: {http.StatusUnprocessableEntity, "Topic refused",
		"The review desk does not take requests on this topic. The refusal is the answer to this intent: it is stored, and a retry with the same key gets it again."},
	apperr.NotCancellable: {http.StatusUnprocessableEntity, "Request cannot be cancelled",
		"The demo request is no longer in a state that can be cancelled: cancelled already, or expedited (paid for). The refusal is stored, and a retry with the same key gets it again."},
	apperr.BeingExpedited: {http.StatusUnprocessableEntity, "Request is being expedited",
		"The demo request has an expedite whose steps are not finished (its slot or charge may be at the review desk right now), so it cannot be cancelled. The refusal is stored, and a retry with the same key gets it again; once the expedite is refused, a cancel under a new key may go ahead. An expedited request cannot be cancelled."},
	apperr.NotExpeditable: {http.StatusUnprocessableEntity, "Request cannot be expedited",
		"The demo request is cancelled, or another key already expedited it. The refusal is stored, and a retry with the same key gets it again."},
	apperr.ExpediteRefused: {http.StatusUnprocessableEntity, "Expedite refused by the review desk",
		"The review desk refused the express slot or the charge. What the run had reserved at the desk was released before this answer was stored; a retry with the same key gets it again."},
	apperr.Internal: {http.StatusInternalServerError, "Internal error",
		"Something went wrong on the service's side. If this was an idempotent request, its claim was released: the same request with the same key may be sent again."},
	apperr.Unavailable: {http.StatusServiceUnavailable, "Service unavailable",
		"The service or its database is unavailable for a moment. Nothing was stored for this request: send it again, with the same idempotency key, after Retry-After seconds."},
}

var (
	errNoRoute = apperr.Errorf(apperr.NotFound, "no such route")
	errMethod  = apperr.Errorf(apperr.MethodNotAllowed, "method not allowed on this route")
)

// problemType is the RFC 9457 type of a code: the page that explains it,
// which the service serves itself (a URI reference relative to the API).
func problemType(code string) string { return "/problems/" + code }

// describedBy are the codes whose answers link to their page, as the
// Idempotency-Key draft asks for the errors of the key.
var describedBy = map[string]bool{apperr.KeyMissing: true, apperr.KeyInvalid: true, apperr.KeyPayloadMismatch: true}

// problem is an RFC 9457 problem body with the machine code beside it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// public returns what a client may see of err: its *apperr.Error, or a
// generic internal error for anything else.
func public(err error) *apperr.Error {
	e, ok := errors.AsType[*apperr.Error](err)
	if _, known := problems[apperr.Code(err)]; !ok || !known || e.Code == apperr.Internal {
		return &apperr.Error{Code: apperr.Internal, Message: "something went wrong on our side"}
	}
	return e
}

// render returns the status, headers and body of err as a problem.
func render(err error) idempotency.Response {
	e := public(err)
	p := problems[e.Code]
	body, _ := json.Marshal(problem{Type: problemType(e.Code), Title: p.title, Status: p.status, Detail: e.Message, Code: e.Code})
	h := map[string]string{"Content-Type": "application/problem+json"}
	if e.RetryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds())))
	}
	if describedBy[e.Code] {
		h["Link"] = "<" + problemType(e.Code) + `>; rel="describedby"`
	}
	return idempotency.Response{Status: p.status, Header: h, Body: body}
}

// writeError writes err as a problem, logging it once when it is ours (5xx).
func writeError(logger *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client left, and the request ended because it did (say while
		// it waited for a database connection): not a server error. No one
		// reads an answer; the request line says client_gone.
		info(r).clientGone = true
		return
	}
	resp := render(err)
	if resp.Status >= 500 {
		logger.ErrorContext(r.Context(), "request failed", "err", err, "request_id", requestID(r))
	}
	noteCode(r, public(err).Code)
	writeResponse(w, resp, false)
}

// writeResponse writes a stored or fresh response; a replay says so.
func writeResponse(w http.ResponseWriter, resp idempotency.Response, replayed bool) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// handleMethodNotAllowed answers 405 with the Allow header chi's own
// handler would send.
func handleMethodNotAllowed(logger *slog.Logger, routes chi.Routes) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(logger, w, r, errMethod)
	}
}

// handleProblemPage is GET /problems/{code}: the page a problem's type
// names, made from the same table as the answers.
func handleProblemPage(logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := chi.URLParam(r, "code")
		p, ok := problems[code]
		if !ok {
			writeError(logger, w, r, apperr.Errorf(apperr.NotFound, "no problem %q", code))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html>\n<title>%s</title>\n<h1>%s</h1>\n<p>HTTP %d, code <code>%s</code>.</p>\n<p>%s</p>\n",
			html.EscapeString(p.title), html.EscapeString(p.title), p.status, html.EscapeString(code), html.EscapeString(p.about))
	})
}

func handleProblem(logger *slog.Logger, err error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeError(logger, w, r, err) }
}
