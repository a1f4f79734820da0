package agtp

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestValidTaskID(t *testing.T) {
	for s, want := range map[string]bool{"t-1": true, "task-0042": true, "!~\"\\{}": true, strings.Repeat("t", 256): true,
		"": false, strings.Repeat("t", 257): false, "a b": false, " a": false, "a\tb": false, "é": false, "a\r\nb": false,
		"a\x00": false, "\x7f": false, "caf\xe9": false} {
		if got := ValidTaskID(s); got != want {
			t.Errorf("ValidTaskID(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestValidSessionIDMatchesPattern: the byte loop accepts exactly what
// the documented pattern does, on every single byte and on random
// strings around the length bounds.
func TestValidSessionIDMatchesPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9._~+/=:-]{22,256}$`)
	base := strings.Repeat("a", 21)
	for c := 0; c < 256; c++ {
		s := base + string([]byte{byte(c)})
		if got, want := ValidSessionID(s), pattern.MatchString(s); got != want {
			t.Fatalf("byte %#x: ValidSessionID = %v, pattern = %v", c, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aZ09._~+/=:- ,\"é\x00"
	for range 20000 {
		n := 18 + rng.IntN(8)
		if rng.IntN(4) == 0 {
			n = 250 + rng.IntN(10)
		}
		b := make([]byte, 0, n)
		for len(b) < n {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		s := string(b)
		if got, want := ValidSessionID(s), pattern.MatchString(s); got != want {
			t.Fatalf("%q: ValidSessionID = %v, pattern = %v", s, got, want)
		}
	}
}

// TestValidRequestID: a UUIDv7 in lowercase 8-4-4-4-12 or a ULID of at
// most 128 bits (first character 0-7), in either case; nothing else.
func TestValidRequestID(t *testing.T) {
	for _, s := range []string{uuid.Must(uuid.NewV7()).String(), "01ARZ3NDEKTSV4RRFFQ69G5FAV", "01arz3ndektsv4rrffq69g5fav", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "00000000000000000000000000"} {
		if !ValidRequestID(s) {
			t.Errorf("ValidRequestID(%q) = false, want true", s)
		}
	}
	for _, s := range []string{"", "bad", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "zZZZZZZZZZZZZZZZZZZZZZZZZZ", "01ARZ3NDEKTSV4RRFFQ69G5FA", "01ARZ3NDEKTSV4RRFFQ69G5FAI",
		"01arz3ndektsv4rrffq69g5fai", strings.ToUpper(uuid.Must(uuid.NewV7()).String()), uuid.NewString()} {
		if ValidRequestID(s) {
			t.Errorf("ValidRequestID(%q) = true, want false", s)
		}
	}
}
