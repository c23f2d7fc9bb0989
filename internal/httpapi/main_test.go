package httpapi_test

import (
	"testing"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
