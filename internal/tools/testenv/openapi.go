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

// Contract is the OpenAPI document the exchanges are checked against.
var Contract = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "api", "openapi.yaml")
}()

// spec is the contract, loaded once for the whole suite.
var spec struct {
	doc       libopenapi.Document
	model     *v3.Document
	validator validator.Validator
	problem   *base.Schema // components.schemas.Problem
}

var loadSpec = sync.OnceValue(func() error {
	raw, err := os.ReadFile(Contract)
	if err != nil {
		return err
	}
	if spec.doc, err = libopenapi.NewDocument(raw); err != nil {
		return fmt.Errorf("parse %s: %w", Contract, err)
	}
	m, err := spec.doc.BuildV3Model()
	if err != nil {
		return fmt.Errorf("build %s: %w", Contract, err)
	}
	spec.model = &m.Model
	var errs []error
	if spec.validator, errs = validator.NewValidator(spec.doc, config.WithFormatAssertions()); len(errs) > 0 {
		return fmt.Errorf("validator for %s: %v", Contract, errs)
	}
	if p := spec.model.Components.Schemas.GetOrZero("Problem"); p != nil {
		spec.problem = p.Schema()
	}
	if spec.problem == nil {
		return fmt.Errorf("%s has no components.schemas.Problem", Contract)
	}
	return nil
})

// checkingTransport fails the test when a response, or an accepted (2xx)
// request, departs from the contract.
type checkingTransport struct{ t testing.TB }

func (c *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
	}
	copyOf := func(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
	r := req.Clone(req.Context()) // the validator reads the bodies: its own copies
	req.Body = copyOf(reqBody)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = copyOf(respBody)
	if err != nil {
		return nil, err
	}
	if err := loadSpec(); err != nil {
		c.t.Errorf("openapi: %v", err)
		return resp, nil
	}
	var msgs []string
	rs := *resp
	r.Body, rs.Header, rs.Body = copyOf(reqBody), resp.Header.Clone(), copyOf(respBody)
	if _, errs := spec.validator.ValidateHttpResponse(r, &rs); len(errs) > 0 {
		if routeMissing(errs) {
			msgs = append(msgs, checkUnrouted(resp, respBody)...)
		} else {
			msgs = append(msgs, describe("response", errs)...)
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		r.Body = copyOf(reqBody)
		if _, errs := spec.validator.ValidateHttpRequestSync(r); len(errs) > 0 {
			msgs = append(msgs, describe("request", errs)...)
		}
	}
	if len(msgs) > 0 {
		c.t.Errorf("openapi: %s %s -> %d does not match %s:\n\t%s\n\tresponse body: %.300s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, Contract, strings.Join(msgs, "\n\t"), respBody)
	}
	return resp, nil
}

// routeMissing reports whether errs only say the route is not in the contract.
func routeMissing(errs []*valerrors.ValidationError) bool {
	return !slices.ContainsFunc(errs, func(e *valerrors.ValidationError) bool {
		return !e.IsPathMissingError() && !e.IsOperationMissingError()
	})
}

// checkUnrouted checks that an unknown route or method is a 404 or 405 problem.
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

// describe renders validation errors, a line each.
func describe(side string, errs []*valerrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		out = append(out, side+": "+e.Error())
	}
	return out
}

// CheckSpec lints the contract: valid OpenAPI 3.1, every operation with an
// operationId and responses, and the Problem code enum the apperr codes.
func CheckSpec(t *testing.T) {
	if err := loadSpec(); err != nil {
		t.Fatal(err)
	}
	info := spec.doc.GetSpecInfo()
	if info.SpecType != "openapi" || !strings.HasPrefix(info.Version, "3.1.") {
		t.Errorf("%s is %s %s, want OpenAPI 3.1", Contract, info.SpecType, info.Version)
	}
	if ok, errs := spec.validator.ValidateDocument(); !ok {
		for _, m := range describe("document", errs) {
			t.Error(m)
		}
	}

	seenIDs := map[string]string{} // every operation leaves one, "" for one without an ID
	for path, item := range spec.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
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
	if len(seenIDs) == 0 {
		t.Fatal("the contract has no operations")
	}

	var enum []string
	for _, n := range spec.problem.Properties.GetOrZero("code").Schema().Enum {
		enum = append(enum, n.Value)
	}
	set := func(s []string) []string { return slices.Compact(slices.Sorted(slices.Values(s))) }
	if codes, enum := set(apperr.Codes()), set(enum); !slices.Equal(codes, enum) {
		t.Errorf("the Problem code enum %v is not the apperr codes %v", enum, codes)
	}
}
