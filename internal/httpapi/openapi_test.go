package httpapi_test

import (
	"testing"

	"github.com/demo-api/demo-api/internal/tools/apitest"
)

// TestOpenAPISpecIsValid: the contract, api/openapi.yaml, is valid
// (apitest.CheckSpec).
func TestOpenAPISpecIsValid(t *testing.T) {
	t.Parallel()
	apitest.CheckSpec(t)
}
