package httpapi_test

import (
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestOpenAPISpecIsValid: the contract, api/openapi.yaml, is valid
// (testenv.CheckSpec).
func TestOpenAPISpecIsValid(t *testing.T) {
	t.Parallel()
	testenv.CheckSpec(t)
}
