package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// problems maps every machine code to its HTTP status and title. It is the
// one place where an error becomes a status.
var problems = map[string]struct {
	status int
	title  string
}{
	apperr.KeyMissing:           {http.StatusBadRequest, "Idempotency-Key header missing"},
	apperr.KeyInvalid:           {http.StatusBadRequest, "Idempotency-Key header invalid"},
	apperr.MalformedJSON:        {http.StatusBadRequest, "Malformed JSON body"},
	apperr.UnknownField:         {http.StatusBadRequest, "Unknown field in body"},
	apperr.InvalidField:         {http.StatusBadRequest, "Invalid field in body"},
	apperr.InvalidQuery:         {http.StatusBadRequest, "Invalid query parameter"},
	apperr.WorkshopDisabled:     {http.StatusBadRequest, "Workshop headers are disabled"},
	apperr.Unauthorized:         {http.StatusUnauthorized, "Missing or unknown bearer token"},
	apperr.NotFound:             {http.StatusNotFound, "Not found"},
	apperr.MethodNotAllowed:     {http.StatusMethodNotAllowed, "Method not allowed"},
	apperr.OperationInProgress:  {http.StatusConflict, "Operation in progress"},
	apperr.BodyTooLarge:         {http.StatusRequestEntityTooLarge, "Body too large"},
	apperr.UnsupportedMediaType: {http.StatusUnsupportedMediaType, "Unsupported media type"},
	apperr.KeyPayloadMismatch:   {http.StatusUnprocessableEntity, "Idempotency key reused with a different payload"},
	apperr.TopicRefused:         {http.StatusUnprocessableEntity, "Topic refused"},
	apperr.Internal:             {http.StatusInternalServerError, "Internal error"},
	apperr.Unavailable:          {http.StatusServiceUnavailable, "Service unavailable"},
}

var (
	errNoRoute = apperr.Errorf(apperr.NotFound, "no such route")
	errMethod  = apperr.Errorf(apperr.MethodNotAllowed, "method not allowed on this route")
)

// problemType is the RFC 9457 type of a code.
func problemType(code string) string { return "urn:demo-api:problem:" + code }

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
	return idempotency.Response{Status: p.status, Header: h, Body: body}
}

// refusal is the idempotency Runner's rule: a client error the work decided
// is a definite answer, stored and replayed; a server error is transient.
func refusal(e *apperr.Error) (idempotency.Response, bool) {
	resp := render(e)
	return resp, resp.Status < 500
}

// writeError writes err as a problem, logging it once when it is ours (5xx).
func writeError(logger *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
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

func handleProblem(logger *slog.Logger, err error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { writeError(logger, w, r, err) }
}
