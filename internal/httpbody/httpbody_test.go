package httpbody

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	big := strings.Repeat("x", ExactReadMax+10)
	tests := []struct {
		name          string
		body          string
		contentLength int64
		limit         int64
		want          string
		wantErr       error
	}{
		{"exact", "hello", 5, 100, "hello", nil},
		{"short", "hello", 10, 100, "hello", io.ErrUnexpectedEOF},
		{"none of it", "", 5, 100, "", io.EOF},
		{"unknown length", "hello world", -1, 100, "hello world", nil},
		{"unknown length over the limit: limit+1 bytes", "hello world", -1, 5, "hello ", nil},
		{"announced over the limit: limit+1 bytes", "hello world", 11, 5, "hello ", nil},
		{"announced over ExactReadMax: read as it comes", big, int64(len(big)), 1 << 20, big, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tt.body), tt.contentLength, tt.limit)
			if string(got) != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Read = %d bytes %q…, %v; want %d bytes, %v", len(got), clipTest(got), err, len(tt.want), tt.wantErr)
			}
		})
	}
}

func clipTest(b []byte) string { return string(b[:min(len(b), 16)]) }

// TestReadReleasesConnection: reading exactly Content-Length bytes
// of a net/http response ends it (net/http reports io.EOF with the last
// bytes), so the keep-alive connection is reused without another Read.
func TestReadReleasesConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "11")
		_, _ = io.WriteString(w, `{"id":"ok"}`)
	}))
	t.Cleanup(srv.Close)
	client := srv.Client()
	reused := 0
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(c httptrace.GotConnInfo) {
				if c.Reused {
					reused++
				}
			},
		}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := Read(resp.Body, resp.ContentLength, 1<<20)
		if err != nil || string(raw) != `{"id":"ok"}` {
			t.Fatalf("Read = %q, %v", raw, err)
		}
		_ = resp.Body.Close()
	}
	if reused != 2 {
		t.Fatalf("%d of the 2 later requests reused the connection, want 2", reused)
	}
}
