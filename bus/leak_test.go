package bus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test shuts down the servers, connections and watches it started, so
// nothing may be left running when the package's tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
