package expedite

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/api/client"
)

// NewIntent makes the client's intent (api/client) of an expedite of
// requestID, with a new key. Like a cancel it sends no body. Its 201 is the
// order (Result.Body: its state, slotReference and chargeReference); while
// its steps wait for the desk it answers 409 operation_in_progress with
// Retry-After, which Client.Send retries. Send's errors add a
// *client.ProblemError of 404 not_found, 422 request_not_expeditable
// (cancelled, or expedited under another key) or 422 expedite_refused (the
// desk refused; what it had reserved is released).
func NewIntent(requestID string) (*client.Intent, error) {
	if requestID == "" {
		return nil, errors.New("expedite: an expedite needs the requestId")
	}
	return &client.Intent{Operation: ExpediteOperation, Method: http.MethodPost,
		Path: "/v1/demo-requests/" + url.PathEscape(requestID) + "/expedite", Key: uuid.NewString(), Header: http.Header{}}, nil
}
