package reboundbolt

import (
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/batch/journaltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ batch.Journal = (*Journal)(nil)

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Opener {
		path := filepath.Join(t.TempDir(), "batch.journal")
		return func() (batch.Journal, error) { return Open(path, Config{}) }
	})
}
