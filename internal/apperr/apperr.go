// Package apperr defines the one application error type, with a machine code
// a client can act on; any other error reaches a client as a generic 500.
package apperr

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The machine codes, each declared once with how it is answered: its HTTP
// status, a title, and the paragraph of its problem page (/problems/<code>).
var (
	// A request the service cannot take: nothing is claimed or stored.
	KeyMissing = Define("idempotency_key_missing", 400, "Idempotency-Key header missing",
		"This operation needs an Idempotency-Key header: 1 to 255 visible ASCII characters, bare (abc) or as a quoted string (\"abc\"). Make one key per intent, before the first attempt, and send the same key with every retry of that intent.")
	KeyInvalid = Define("idempotency_key_invalid", 400, "Idempotency-Key header invalid",
		"The Idempotency-Key header was sent more than once, or is not 1 to 255 visible ASCII characters, bare or as a quoted string. Nothing was stored.")
	InvalidHeader = Define("invalid_header", 400, "Invalid header",
		"A header of the request has a value the service does not accept, for example X-Client-Attempt that is not a whole number from 1 up, or a Workshop-* header with a bad value. Nothing was stored.")
	MalformedJSON = Define("malformed_json", 400, "Malformed JSON body",
		"The body is not one JSON object of valid UTF-8. Nothing was stored.")
	UnknownField = Define("unknown_field", 400, "Unknown field in body",
		"The body has a member that is not a field of this request (names are matched exactly). Nothing was stored.")
	InvalidField = Define("invalid_field", 400, "Invalid field in body",
		"A field has the wrong type, is null, appears twice, or breaks a rule of its own (such as an empty topic). Nothing was stored.")
	InvalidQuery = Define("invalid_query", 400, "Invalid query parameter",
		"A query parameter has a value the route does not accept.")
	WorkshopDisabled = Define("workshop_disabled", 400, "Workshop headers are disabled",
		"The Workshop-* headers reproduce each branch of the contract on demand. They work only when the server runs with WORKSHOP=true.")
	Unauthorized = Define("unauthorized", 401, "Missing or unknown bearer token",
		"Send Authorization: Bearer <token> with a token the service knows.")
	NotFound = Define("not_found", 404, "Not found",
		"There is no such resource for this actor. Another actor's resources are not found either.")
	MethodNotAllowed = Define("method_not_allowed", 405, "Method not allowed",
		"The route exists, but not with this method; the Allow header lists those it takes.")
	BodyTooLarge = Define("body_too_large", 413, "Body too large",
		"The body is over the service's limit. Nothing was stored.")
	UnsupportedMediaType = Define("unsupported_media_type", 415, "Unsupported media type",
		"Send the body as Content-Type: application/json, in UTF-8. Nothing was stored.")

	// The key's own answers: nothing runs.
	OperationInProgress = Define("operation_in_progress", 409, "Operation in progress",
		"An earlier request with this idempotency key is still being processed, and nothing was run for this one. Send the same request again after Retry-After seconds, or ask the route of the Link rel=\"monitor\" header what became of the key. Send Prefer: wait=N to wait up to N seconds for the answer instead.")
	KeyPayloadMismatch = Define("key_payload_mismatch", 422, "Idempotency key reused with a different payload",
		"This idempotency key was already used for a request with different significant fields: a key names one intent. Nothing was run or changed. Make a new key for a new intent; do not retry this request as it is.")

	// The bound on new keys: nothing runs, nothing is stored.
	RateLimited = Define("rate_limited", 429, "Too many new keys",
		"This actor sent more new idempotency keys than the service takes in a moment. Nothing was run or stored for this request. Send the same request, with the same key, after Retry-After seconds. A retry of a key the service already holds is never refused this way: the key is not a rate limit, and a client that makes a new key for every attempt meets this bound.")

	// Refusals by a business rule: stored and replayed like a success.
	TopicRefused = Define("topic_refused", 422, "Topic refused",
		"This service does not take requests on this topic (its REFUSED_TOPICS). The refusal is the answer to this intent: it is stored, and a retry with the same key gets it again.")
	NotCancellable = Define("request_not_cancellable", 422, "Request cannot be cancelled",
		"The demo request is no longer in a state that can be cancelled: cancelled already, or held by another operation. The refusal is stored, and a retry with the same key gets it again.")

	// Failures on the service's side: not stored, the claim is released.
	Internal = Define("internal", 500, "Internal error",
		"Something went wrong on the service's side. If this was an idempotent request, its claim was released: the same request with the same key may be sent again.")
	Unavailable = Define("unavailable", 503, "Service unavailable",
		"The service or its database is unavailable for a moment. Nothing was stored for this request: send it again, with the same idempotency key, after Retry-After seconds.")
)

// Problem is how a code is answered.
type Problem struct {
	Status int    // the HTTP status
	Title  string // the problem's title
	About  string // what it means and what the client should do
}

var problems = map[string]Problem{}

// Define declares code with how it is answered, once, and returns it.
func Define(code string, status int, title, about string) string {
	if _, dup := problems[code]; dup {
		panic("apperr: code " + code + " declared twice")
	}
	problems[code] = Problem{Status: status, Title: title, About: about}
	return code
}

// ProblemOf returns how code is answered, and whether it is a code.
func ProblemOf(code string) (Problem, bool) {
	p, ok := problems[code]
	return p, ok
}

// Codes returns every machine code, sorted.
func Codes() []string { return slices.Sorted(maps.Keys(problems)) }

// Error is an error a client can act on.
type Error struct {
	Code       string
	Message    string
	RetryAfter time.Duration // when positive, how long the client should wait before trying again
	Err        error         // the cause, logged but never shown to a client
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the code of the first *Error in err's chain, or Internal.
func Code(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return Internal
}
