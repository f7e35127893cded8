package opreg_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	opreg "github.com/opreg/opreg/client/go"
)

// The README's RunOnce example (compiled, not run).
func ExampleClient_RunOnce() {
	ctx := context.Background()
	client, err := opreg.Dial(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	result, err := client.RunOnce(ctx, "payments", "debit:order-42", map[string]any{"account": "A", "amount": 100},
		func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
			// debit the account, fenced by lease.FencingToken(); stop when ctx is done
			return []byte("ledger-entry-9"), nil
		})
	if err != nil {
		log.Fatal(err) // *opreg.BusinessFailureError, *opreg.LeaseLostError, ...
	}
	log.Printf("%s (replayed: %v)", result.Value, result.Replayed)
}

// The README's Worker example (compiled, not run).
func ExampleWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client, err := opreg.Dial(ctx, "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	worker := &opreg.Worker{Client: client, Namespace: "payments", Handlers: map[string]opreg.Work{
		"debit": func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
			amount := lease.Operation().GetParameters().GetFields()["amount"].GetNumberValue()
			log.Printf("debiting %v", amount)
			return []byte("ok"), nil
		},
	}}
	if err := worker.Run(ctx); err != nil { // until Ctrl-C, then a grace period
		log.Fatal(err)
	}
}
