package caddymodule

import (
	"net/http"
	"strings"
	"testing"
)

// TestMCPCORS: a browser-based MCP client from an allowed origin can use
// the MCP path. Its preflight (it sends Agent-ID and a JSON body, so a
// browser always asks first) is answered 204 allowing the method and
// fields it asked for, instead of the 401 it got; every answer to an
// allowed Origin, a refusal included, says that origin may read it and
// exposes the AGTP fields; a foreign origin is still refused, preflight
// or not.
func TestMCPCORS(t *testing.T) {
	const allowed = "http://localhost:5173"
	_, url := mcpGateway(t, func(h *Handler) { h.MCP.AllowedOrigins = []string{allowed} })

	pre, err := http.NewRequest(http.MethodOptions, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	pre.Header.Set("Origin", allowed)
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "agent-id, content-type")
	resp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		resp.Header.Get("Access-Control-Allow-Headers") != "agent-id, content-type" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}

	status, hdr, body := mcpPost(t, url, listMsg, map[string]string{"Agent-ID": benchAgent, "Origin": allowed})
	if status != 200 || hdr.Get("Access-Control-Allow-Origin") != allowed || !strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "Attribution-Record") || !strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "RCNS-Attempt-Id") {
		t.Fatalf("tools/list from an allowed origin: %d %v %s", status, hdr, body)
	}
	status, hdr, body = mcpPost(t, url, listMsg, map[string]string{"Origin": allowed})
	if status != 401 || hdr.Get("Access-Control-Allow-Origin") != allowed || hdr.Get("WWW-Authenticate") == "" ||
		!strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "WWW-Authenticate") {
		t.Fatalf("a refusal to an allowed origin is not readable by it: %d %v %s", status, hdr, body)
	}

	pre.Header.Set("Origin", "https://evil.example")
	resp, err = http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from a foreign origin: %d %v", resp.StatusCode, resp.Header)
	}
	// Without an Origin (not a browser) nothing changes.
	if status, hdr, _ := mcpPost(t, url, listMsg, map[string]string{"Agent-ID": benchAgent}); status != 200 || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("tools/list without Origin: %d %v", status, hdr)
	}
}
