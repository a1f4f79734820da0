package hexid

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestValidDecode(t *testing.T) {
	ok := strings.Repeat("0a", 32)
	for _, c := range []struct {
		s    string
		want bool
	}{
		{ok, true},
		{strings.Repeat("f", 64), true},
		{strings.ToUpper(ok), false},
		{ok[:63], false},
		{ok + "0", false},
		{ok[:63] + "g", false},
		{"", false},
	} {
		if got := Valid(c.s); got != c.want {
			t.Errorf("Valid(%q) = %v", c.s, got)
		}
		id, got := Decode(c.s)
		if got != c.want {
			t.Errorf("Decode(%q) ok = %v", c.s, got)
		}
		if got && (id[0] != 0x0a && id[0] != 0xff || id[31] != id[0]) {
			t.Errorf("Decode(%q) = %x", c.s, id)
		}
	}
}

// reference is what Valid and Decode must answer: encoding/hex's
// decoding, of lowercase input only.
func reference(s string) ([32]byte, bool) {
	var id [32]byte
	if len(s) != 64 || s != strings.ToLower(s) {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return [32]byte{}, false
	}
	return id, true
}

// TestEveryByte puts each of the 256 byte values at each of the 64
// positions of a valid id: the table must agree with encoding/hex on
// every one (a digit, a lowercase letter, and everything else).
func TestEveryByte(t *testing.T) {
	base := []byte(strings.Repeat("0123456789abcdef", 4))
	for pos := range base {
		for c := 0; c < 256; c++ {
			b := append([]byte(nil), base...)
			b[pos] = byte(c)
			s := string(b)
			want, wantOK := reference(s)
			if got := Valid(s); got != wantOK {
				t.Fatalf("Valid with %#x at %d = %v, want %v", c, pos, got, wantOK)
			}
			if id, ok := Decode(s); ok != wantOK || id != want {
				t.Fatalf("Decode with %#x at %d = %x %v, want %x %v", c, pos, id, ok, want, wantOK)
			}
		}
	}
}

// FuzzDecode holds Valid and Decode to the reference on any input.
func FuzzDecode(f *testing.F) {
	f.Add(strings.Repeat("0a", 32))
	f.Add(strings.Repeat("F", 64))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		want, wantOK := reference(s)
		if Valid(s) != wantOK {
			t.Fatalf("Valid(%q) = %v", s, !wantOK)
		}
		if id, ok := Decode(s); ok != wantOK || id != want {
			t.Fatalf("Decode(%q) = %x %v, want %x %v", s, id, ok, want, wantOK)
		}
	})
}

// ids are 4096 Audit-IDs of random digits and letters, as SHA-256
// gives them: a benchmark on one id alone lets the branch predictor
// learn it, which a server's stream of ids never does.
func ids() []string {
	out := make([]string, 4096)
	for i := range out {
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		out[i] = hex.EncodeToString(sum[:])
	}
	return out
}

// BenchmarkDecode decodes a stream of ids.
func BenchmarkDecode(b *testing.B) {
	in := ids()
	i := 0
	for b.Loop() {
		if _, ok := Decode(in[i%len(in)]); !ok {
			b.Fatal("not valid")
		}
		i++
	}
}

// BenchmarkValid checks a stream of ids.
func BenchmarkValid(b *testing.B) {
	in := ids()
	i := 0
	for b.Loop() {
		if !Valid(in[i%len(in)]) {
			b.Fatal("not valid")
		}
		i++
	}
}
