// Package apperr defines the one application error type: an error with a
// machine-readable code that a client can act on. Any other error is internal
// and reaches a client only as a generic 500.
package apperr

import (
	"errors"
	"fmt"
	"time"
)

// Machine codes. The HTTP layer maps each to a status and a problem type.
const (
	Unauthorized         = "unauthorized"
	NotFound             = "not_found"
	MethodNotAllowed     = "method_not_allowed"
	KeyMissing           = "idempotency_key_missing"
	KeyInvalid           = "idempotency_key_invalid"
	MalformedJSON        = "malformed_json"
	UnknownField         = "unknown_field"
	InvalidField         = "invalid_field"
	BodyTooLarge         = "body_too_large"
	UnsupportedMediaType = "unsupported_media_type"
	OperationInProgress  = "operation_in_progress"
	KeyPayloadMismatch   = "key_payload_mismatch"
	TopicRefused         = "topic_refused"
	NotCancellable       = "request_not_cancellable"
	NotExpeditable       = "request_not_expeditable"
	BeingExpedited       = "request_being_expedited"
	ExpediteRefused      = "expedite_refused"
	InvalidHeader        = "invalid_header"
	WorkshopDisabled     = "workshop_disabled"
	InvalidQuery         = "invalid_query"
	Unavailable          = "unavailable"
	Internal             = "internal"
)

// Error is an error a client can act on.
type Error struct {
	Code    string
	Message string
	// RetryAfter, when positive, tells the client how long to wait before
	// trying again (operation_in_progress, unavailable).
	RetryAfter time.Duration
	// Err is the cause, logged but never shown to a client.
	Err error
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
