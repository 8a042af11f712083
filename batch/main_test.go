package batch_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them: a run
// leaves no sender, no connection and no timer behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
