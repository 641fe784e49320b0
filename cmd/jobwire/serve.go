package main

import (
	"context"
	"errors"
)

// runServe starts the broker. It is replaced by the real implementation.
func runServe(ctx context.Context, args []string) error {
	_ = ctx
	_ = args
	return errors.New("serve is not built yet")
}
