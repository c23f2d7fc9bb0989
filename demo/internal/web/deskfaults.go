package web

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// maxDeskFaults bounds the body of PUT /workshop/desk-faults.
const maxDeskFaults = 4 << 10

// DeskFaults is PUT /workshop/desk-faults: it hands a JSON object of
// the review desk's faults ({"down":true}, {} to clear) to the desk, so
// that the workshop page, which calls only this origin, can make the
// external call stick. The faults are the caller's own: aimed at the
// calls the desk gets for the caller's requests (its "account"), set and
// cleared apart from everyone else's, so that in a workshop room one
// participant's faults never touch another's deliveries. It is routed only
// with the workshop on.
//
// Errors: malformed_json, body_too_large, workshop_disabled (the desk
// refuses its knobs), invalid_field (another account, or the desk refuses
// these faults, such as a delay that is not a duration), unavailable.
func DeskFaults(logger *slog.Logger, set func(context.Context, json.RawMessage) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := body.Read(w, r, maxDeskFaults)
		var obj map[string]json.RawMessage
		switch {
		case err == nil && (json.Unmarshal(b, &obj) != nil || obj == nil):
			err = apperr.Errorf(apperr.MalformedJSON, "send the desk's faults as a JSON object, such as {\"down\":true}, or {} to clear them")
		case err == nil:
			if b, err = ownFaults(obj, httpapi.ActorOf(r)); err == nil {
				err = set(r.Context(), b)
			}
		}
		if err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, json.RawMessage(b))
	})
}

// ownFaults is the desk's faults obj aimed at actor's account. Errors:
// invalid_field when obj names another account.
func ownFaults(obj map[string]json.RawMessage, actor string) ([]byte, error) {
	mine, err := json.Marshal(actor)
	if err != nil {
		return nil, err
	}
	if a, ok := obj["account"]; ok {
		var named string
		if json.Unmarshal(a, &named) != nil || named != actor {
			return nil, apperr.Errorf(apperr.InvalidField, "account: you set the faults of your own account only; leave it out")
		}
	}
	obj["account"] = mine
	return json.Marshal(obj)
}

// SetDeskFaults sets the desk's fault knobs for the workshop page, within 5 s.
func SetDeskFaults(desk *deskclient.Client) func(context.Context, json.RawMessage) error {
	return func(ctx context.Context, faults json.RawMessage) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := desk.SetFaults(ctx, faults)
		refused, isRefused := errors.AsType[*reviewdesk.RefusedError](err)
		switch {
		case errors.Is(err, deskclient.ErrFaultsDisabled):
			return apperr.Errorf(apperr.WorkshopDisabled, "the review desk refuses its fault knobs: start it with PROVIDER_FAULTS=true (make run does)")
		case isRefused:
			// A refusal is an answer: the same faults again cannot pass.
			return apperr.Errorf(apperr.InvalidField, "the review desk refused these faults: %s", refused.Detail)
		case err != nil:
			return &apperr.Error{Code: apperr.Unavailable, Message: "the review desk did not take the faults", RetryAfter: time.Second, Err: err}
		}
		return nil
	}
}
