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
		// No userinfo, no fragment; a query is an endpoint's right.
		"https://user:pw@auth.example.com/":   ErrUserinfo,
		"https://user@auth.example.com/token": ErrUserinfo,
		"https://@auth.example.com/token":     ErrUserinfo,
		"http://user:pw@127.0.0.1:9000/":      ErrUserinfo,
		"http://user:pw@auth.example.com/":    ErrUserinfo,
		"https://auth.example.com/token#x":    ErrFragment,
		"https://auth.example.com/token#":     ErrFragment,
		"https://auth.example.com/token?x=1":  nil,
	} {
		if got := Check(s); !errors.Is(got, want) {
			t.Errorf("Check(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestCheckIssuer: an issuer is Check's URL without a query (RFC 8414
// §2).
func TestCheckIssuer(t *testing.T) {
	for s, want := range map[string]error{
		"https://auth.example.com":           nil,
		"https://auth.example.com/realms/x":  nil,
		"http://localhost:9000":              nil,
		"https://auth.example.com/?tenant=a": ErrQuery,
		"https://auth.example.com?":          ErrQuery,
		"https://auth.example.com/#x":        ErrFragment,
		"https://u:p@auth.example.com":       ErrUserinfo,
		"http://auth.example.com":            ErrCleartext,
		"/realms/x":                          ErrNotAbsolute,
	} {
		if got := CheckIssuer(s); !errors.Is(got, want) {
			t.Errorf("CheckIssuer(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestRedacted: a password is replaced; anything else is quoted as
// written, a trailing "#" included (helper-80: the error about a
// fragment quoted the URL without it).
func TestRedacted(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pw@as.example/x": "https://user:xxxxx@as.example/x",
		"https://as.example/#":         "https://as.example/#",
		"https://user@as.example/":     "https://user@as.example/",
		"https://as.example/p?q=1#f":   "https://as.example/p?q=1#f",
		"%zz":                          "%zz",
	} {
		if got := Redacted(in); got != want {
			t.Errorf("Redacted(%q) = %q, want %q", in, got, want)
		}
	}
}
