package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/demo-api/demo-api/internal/apperr"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 64 << 10

// decodeJSON decodes the JSON body of r into v: exactly one JSON object of
// known fields, of media type application/json, at most MaxBodyBytes long.
//
// Errors: unsupported_media_type, body_too_large, malformed_json,
// unknown_field, invalid_field.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return apperr.Errorf(apperr.UnsupportedMediaType, "send the body as Content-Type: application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		switch err = dec.Decode(&json.RawMessage{}); err {
		case io.EOF:
			return nil
		case nil:
			err = errors.New("more than one JSON value")
		}
	}
	var (
		tooLarge *http.MaxBytesError
		typeErr  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", MaxBodyBytes)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return apperr.Errorf(apperr.MalformedJSON, "the body must be a JSON object")
		}
		return apperr.Errorf(apperr.InvalidField, "%s must be a %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no error type for this one.
		return apperr.Errorf(apperr.UnknownField, "%s is not a field of this request", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case err == io.EOF:
		return apperr.Errorf(apperr.MalformedJSON, "the body is empty")
	default:
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", trimJSONPrefix(err))
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "struct", "map":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	default:
		return "number"
	}
}

func trimJSONPrefix(err error) string {
	return strings.TrimPrefix(fmt.Sprint(err), "json: ")
}
