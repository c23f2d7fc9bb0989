package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/demo-api/demo-api/internal/apperr"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 64 << 10

// decodeJSON decodes the body of r into v, a pointer to a struct: exactly
// one JSON object, of media type application/json, at most MaxBodyBytes long,
// whose members are fields of v spelled exactly, each once, none null.
// (encoding/json alone would match names case-insensitively, let the last of
// two duplicates win, and read null as the zero value.)
//
// Errors: unsupported_media_type, body_too_large, malformed_json,
// unknown_field, invalid_field.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return apperr.Errorf(apperr.UnsupportedMediaType, "send the body as Content-Type: application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		return apperr.Errorf(apperr.BodyTooLarge, "the body must be at most %d bytes", MaxBodyBytes)
	} else if err != nil {
		return apperr.Errorf(apperr.MalformedJSON, "the body could not be read")
	}
	if err := checkMembers(body, jsonFields(v)); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && typeErr.Field != "" {
			return apperr.Errorf(apperr.InvalidField, "%s must be a %s", typeErr.Field, jsonKind(typeErr.Type.Kind()))
		}
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// checkMembers checks the members of the JSON object in body against fields.
func checkMembers(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	malformed := func(err error) error {
		if err == io.EOF {
			return apperr.Errorf(apperr.MalformedJSON, "the body is empty")
		}
		return apperr.Errorf(apperr.MalformedJSON, "the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if tok, err := dec.Token(); err != nil {
		return malformed(err)
	} else if tok != json.Delim('{') {
		return apperr.Errorf(apperr.MalformedJSON, "the body must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(err)
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return malformed(err)
		}
		switch {
		case !fields[name]:
			return apperr.Errorf(apperr.UnknownField, "%q is not a field of this request", name)
		case seen[name]:
			return apperr.Errorf(apperr.InvalidField, "%s appears twice", name)
		case string(value) == "null":
			return apperr.Errorf(apperr.InvalidField, "%s must not be null; leave it out instead", name)
		}
		seen[name] = true
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.Errorf(apperr.MalformedJSON, "the body holds more than one JSON value")
	}
	return nil
}

// jsonFields returns the JSON member names of the struct v points to.
func jsonFields(v any) map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}

func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Bool:
		return "boolean"
	default:
		return "number"
	}
}
