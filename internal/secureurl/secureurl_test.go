package secureurl

import (
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	for s, want := range map[string]error{
		"https://auth.example.com/token": nil,
		"https://auth.example.com":       nil,
		"http://localhost:8080/token":    nil,
		"http://127.0.0.1:9000":          nil,
		"http://[::1]:9000/realms/x":     nil,
		"http://auth.example.com/token":  ErrCleartext,
		"http://10.0.0.5/token":          ErrCleartext,
		"http://localhost.example.com/":  ErrCleartext,
		"http://127.0.0.1.nip.io/token":  ErrCleartext,
		"ftp://auth.example.com/token":   ErrCleartext,
		"/token":                         ErrNotAbsolute,
		"auth.example.com/token":         ErrNotAbsolute,
		"":                               ErrNotAbsolute,
		"https://%zz":                    ErrNotAbsolute,
	} {
		if got := Check(s); !errors.Is(got, want) {
			t.Errorf("Check(%q) = %v, want %v", s, got, want)
		}
	}
}
