package plural

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 files hold"}, {1, "1 file holds"}, {2, "2 files hold"}, {-1, "-1 file holds"}, {11, "11 files hold"}} {
		if got := Count(c.n, "file holds", "files hold"); got != c.want {
			t.Errorf("Count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Count(1, "endpoint", "endpoints"); got != "1 endpoint" {
		t.Errorf("Count(int 1) = %q", got)
	}
}
