package expedite_test

import (
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }
