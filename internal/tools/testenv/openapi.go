package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
)

// specPath is the contract, api/openapi.yaml of this module.
var specPath = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "api", "openapi.yaml")
}()

// extraSpec, if set (Extend), adds to the contract.
var extraSpec string

// Extend adds the OpenAPI document at path to the contract the exchanges
// are checked against: its paths and its components replace those of the
// same name, and add to the rest. A service built on the template
// documents its own routes so, and calls it in TestMain.
func Extend(path string) { extraSpec = path }

// Spec is the contract the exchanges are checked against, as YAML.
func Spec() ([]byte, error) {
	raw, err := os.ReadFile(specPath)
	if err != nil || extraSpec == "" {
		return raw, err
	}
	more, err := os.ReadFile(extraSpec)
	if err != nil {
		return nil, err
	}
	var base, add yaml.Node
	if err := yaml.Unmarshal(raw, &base); err != nil {
		return nil, fmt.Errorf("%s: %w", specPath, err)
	}
	if err := yaml.Unmarshal(more, &add); err != nil {
		return nil, fmt.Errorf("%s: %w", extraSpec, err)
	}
	for _, at := range [][]string{{"paths"}, {"components", "schemas"}, {"components", "responses"}, {"components", "parameters"}, {"components", "headers"}} {
		if from := lookup(add.Content[0], at...); from != nil {
			into := lookup(base.Content[0], at...)
			if into == nil {
				return nil, fmt.Errorf("%s has no %s to add to", specPath, strings.Join(at, "."))
			}
			for i := 0; i < len(from.Content); i += 2 {
				set(into, from.Content[i], from.Content[i+1])
			}
		}
	}
	return yaml.Marshal(&base)
}

// lookup is the mapping at path in the mapping m, nil if none.
func lookup(m *yaml.Node, path ...string) *yaml.Node {
	for _, name := range path {
		var next *yaml.Node
		for i := 0; m != nil && i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == name {
				next = m.Content[i+1]
			}
		}
		m = next
	}
	return m
}

// set puts value under key in the mapping m, replacing one of that name.
func set(m, key, value *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key.Value {
			m.Content[i+1] = value
			return
		}
	}
	m.Content = append(m.Content, key, value)
}

// spec is the contract, loaded once for the whole suite.
var spec struct {
	once      sync.Once
	err       error
	doc       libopenapi.Document
	model     *v3.Document
	validator validator.Validator
	problem   *base.Schema // components.schemas.Problem
}

func loadSpec() error {
	spec.once.Do(func() {
		raw, err := Spec()
		if err != nil {
			spec.err = err
			return
		}
		if spec.doc, err = libopenapi.NewDocument(raw); err != nil {
			spec.err = fmt.Errorf("parse %s: %w", specPath, err)
			return
		}
		m, err := spec.doc.BuildV3Model()
		if err != nil {
			spec.err = fmt.Errorf("build %s: %w", specPath, err)
			return
		}
		spec.model = &m.Model
		v, errs := validator.NewValidator(spec.doc, config.WithFormatAssertions())
		if len(errs) > 0 {
			spec.err = fmt.Errorf("validator for %s: %v", specPath, errs)
			return
		}
		spec.validator = v
		if p := spec.model.Components.Schemas.GetOrZero("Problem"); p != nil {
			spec.problem = p.Schema()
		}
		if spec.problem == nil {
			spec.err = fmt.Errorf("%s has no components.schemas.Problem", specPath)
		}
	})
	return spec.err
}

// checkOpenAPI fails the test when an exchange departs from the contract.
// The response is always checked: its status must be documented for the
// operation, with its required headers, content type and body schema. The
// request is checked only when the server accepted it (2xx): the suite sends
// deliberately wrong requests to test their rejection, and the contract
// describes what a client should send, not what the server refuses.
func checkOpenAPI(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	if err := loadSpec(); err != nil {
		t.Errorf("openapi: %v", err)
		return
	}
	var msgs []string

	// The validator reads the bodies; give it its own copies.
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	rs := *resp
	rs.Header = resp.Header.Clone()
	rs.Body = io.NopCloser(bytes.NewReader(respBody))

	if _, errs := spec.validator.ValidateHttpResponse(r, &rs); len(errs) > 0 {
		if routeMissing(errs) {
			// Unmatched routes and wrong methods are not documented per path:
			// they must be a 404 or 405 problem.
			msgs = append(msgs, checkUnrouted(resp, respBody)...)
		} else {
			msgs = append(msgs, describe("response", errs)...)
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		if _, errs := spec.validator.ValidateHttpRequestSync(r); len(errs) > 0 {
			msgs = append(msgs, describe("request", errs)...)
		}
	}
	if len(msgs) > 0 {
		t.Errorf("openapi: %s %s -> %d does not match %s:\n\t%s\n\tresponse body: %.300s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, specPath, strings.Join(msgs, "\n\t"), respBody)
	}
}

// routeMissing reports whether errs only say that the path or method is not
// in the contract.
func routeMissing(errs []*valerrors.ValidationError) bool {
	for _, e := range errs {
		if !e.IsPathMissingError() && !e.IsOperationMissingError() {
			return false
		}
	}
	return true
}

// checkUnrouted checks the answer to a route the contract does not have.
func checkUnrouted(resp *http.Response, body []byte) []string {
	want := map[int]string{http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed"}[resp.StatusCode]
	if want == "" {
		return []string{fmt.Sprintf("response: status %d on a route or method the contract does not have (want 404 or 405)", resp.StatusCode)}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		return []string{fmt.Sprintf("response: %d with Content-Type %q, want application/problem+json", resp.StatusCode, ct)}
	}
	var msgs []string
	if _, errs := schema_validation.NewSchemaValidator(config.WithFormatAssertions()).ValidateSchemaBytes(spec.problem, body); len(errs) > 0 {
		msgs = append(msgs, describe("response body (Problem)", errs)...)
	}
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Status != resp.StatusCode || p.Code != want {
		msgs = append(msgs, fmt.Sprintf("response: problem %s, want status %d and code %s", body, resp.StatusCode, want))
	}
	return msgs
}

// describe renders validation errors, one line each.
func describe(side string, errs []*valerrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		line := side + ": " + e.Message
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			line += "; " + f.Reason
			if f.FieldPath != "" {
				line += " (at " + f.FieldPath + ")"
			} else if f.KeywordLocation != "" {
				line += " (at " + f.KeywordLocation + ")"
			}
		}
		out = append(out, line)
	}
	return out
}

// CheckSpec lints the contract: it is OpenAPI 3.1 that parses and validates
// against the 3.1 schema, every operation has an operationId and responses,
// and the Problem code enum is exactly the machine codes of internal/apperr
// (a service's own among them, when its package that declares them is in
// the test).
func CheckSpec(t *testing.T) {
	if err := loadSpec(); err != nil {
		t.Fatal(err)
	}
	info := spec.doc.GetSpecInfo()
	if info.SpecType != "openapi" || !strings.HasPrefix(info.Version, "3.1.") {
		t.Errorf("%s is %s %s, want OpenAPI 3.1", specPath, info.SpecType, info.Version)
	}
	if ok, errs := spec.validator.ValidateDocument(); !ok {
		for _, m := range describe("document", errs) {
			t.Error(m)
		}
	}

	var operations int
	seenIDs := map[string]string{}
	for path, item := range spec.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			operations++
			where := strings.ToUpper(method) + " " + path
			switch prev, dup := seenIDs[op.OperationId]; {
			case op.OperationId == "":
				t.Errorf("%s has no operationId", where)
			case dup:
				t.Errorf("%s and %s share operationId %s", prev, where, op.OperationId)
			}
			seenIDs[op.OperationId] = where
			if op.Responses == nil || (orderedmap.Len(op.Responses.Codes) == 0 && op.Responses.Default == nil) {
				t.Errorf("%s has no responses", where)
			}
		}
	}
	if operations == 0 {
		t.Fatal("the contract has no operations")
	}

	codes := apperr.Codes()
	var enum []string
	for _, n := range spec.problem.Properties.GetOrZero("code").Schema().Enum {
		enum = append(enum, n.Value)
	}
	for _, c := range codes {
		if !slices.Contains(enum, c) {
			t.Errorf("apperr code %q is not in the Problem code enum", c)
		}
	}
	for _, c := range enum {
		if !slices.Contains(codes, c) {
			t.Errorf("Problem code enum has %q, which is no apperr code", c)
		}
	}
}
