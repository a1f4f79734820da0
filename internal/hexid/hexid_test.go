package hexid

import (
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
