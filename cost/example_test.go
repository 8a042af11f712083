package cost_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

// A run capped at 5 cents. Each attempt reserves what it may cost before
// it is made, and settles at what it reports; the third call, whose
// reservation would pass the cap, is refused before anything is sent.
func ExampleWithCaps() {
	prices := cost.Table{"gpt-x": {InputPerMillion: 2.5, OutputPerMillion: 10}}
	run := &cost.Limit{USD: 0.05}
	ctx := cost.WithCaps(context.Background(), prices, run)
	// Do knows nothing of the requests its function makes: the estimate
	// says what one attempt may use, here $0.02.
	ctx = cost.WithEstimate(ctx, "gpt-x", cost.Usage{InputTokens: 4000, OutputTokens: 1000})

	sent := 0
	for call := 1; call <= 3; call++ {
		_, err := rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (string, error) {
			sent++
			cost.Report(ctx, cost.Usage{InputTokens: 4000, OutputTokens: 800}) // what the provider billed: $0.018
			return "an answer", nil
		})
		var ce *cost.CapError
		if errors.As(err, &ce) {
			fmt.Printf("call %d refused: $%.3f spent, $%.3f needed, of $%.2f\n", call, ce.Spent, ce.Need, ce.Limit)
			continue
		}
		fmt.Printf("call %d answered: $%.3f spent\n", call, run.Spent())
	}
	fmt.Println("requests sent:", sent)
	// Output:
	// call 1 answered: $0.018 spent
	// call 2 answered: $0.036 spent
	// call 3 refused: $0.036 spent, $0.020 needed, of $0.05
	// requests sent: 2
}
