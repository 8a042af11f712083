package rebound

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. Run
// with hostileEnv set, the test binary is the hostile server instead.
func TestMain(m *testing.M) {
	if os.Getenv(hostileEnv) != "" {
		serveHostile()
	}
	goleak.VerifyTestMain(m)
}
