package expedite_test

import (
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestOpenAPISpecIsValid: the full demo's contract, the template's with
// demo/api/openapi.yaml, is valid, and its Problem codes are the template's
// and the expedite's (testenv.CheckSpec).
func TestOpenAPISpecIsValid(t *testing.T) {
	t.Parallel()
	testenv.CheckSpec(t)
}
