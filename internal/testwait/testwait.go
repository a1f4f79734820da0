// Package testwait holds the tests' bounded waits: a test that waits for
// the code under test fails at a bound instead of hanging until go
// test's -timeout. Only tests import it.
package testwait

import (
	"testing"
	"time"
)

// Returns runs f and fails t when f has not returned within; it returns
// f's error. what names the call in the failure ("Close after a batch
// panicked").
func Returns(t testing.TB, within time.Duration, f func() error, what string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s did not return within %s", what, within)
		return nil
	}
}
