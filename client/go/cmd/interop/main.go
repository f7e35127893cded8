// Interop, Go side: go run ./cmd/interop ADDRESS NAMESPACE LANGUAGE...
//
// Replays interop:<language> (recorded with result from-<language>) for each
// language named, by a digest of the shared parameters computed here (it must
// not execute), then records interop:go with result from-go through RunOnce,
// and prints one line.
// ADDRESS is host:port (or http://host:port).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/opreg/opreg/client/go/internal/interop"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: interop ADDRESS NAMESPACE LANGUAGE...")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	line, err := interop.Run(ctx, os.Args[1], os.Args[2], os.Args[3:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go interop:", err)
		os.Exit(1)
	}
	fmt.Println(line)
}
