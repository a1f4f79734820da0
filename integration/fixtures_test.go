package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"testing"
)

// Fixtures: the demo agents (examples/hotel/agents) mapped onto the
// spec §24 fixture (A1 → rcns-demo-agent, A2 → rcns-demo-noscope, A3 →
// rcns-demo-tier3, OP → rcns-demo-operator), request headers and
// bodies, and the patterns answers are checked against.

// agentID is the demo's agent id: lowercase hex SHA-256 of the name.
func agentID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

var (
	agentA1 = agentID("rcns-demo-agent")    // tier 1: rcns:negotiate hotel:read hotel:book
	agentA2 = agentID("rcns-demo-noscope")  // tier 1: hotel:read hotel:book
	agentA3 = agentID("rcns-demo-tier3")    // tier 3: rcns:negotiate hotel:read hotel:book
	agentOP = agentID("rcns-demo-operator") // tier 1: inspect:all + the three
)

const (
	scopeAll     = "rcns:negotiate, hotel:read, hotel:book"
	scopeNoRCNS  = "hotel:read, hotel:book"
	recipeName   = "book-room"
	recipeVer    = "1"
	demoCheckIn  = "2026-12-01"
	demoNights   = 2
	demoGuest    = "g-1"
	demoProperty = "p-1"
	hotelDB      = "examples/hotel/db.json"
)

// The six 464 reason tokens (RCNS §19).
var reasons464 = []string{
	"rcns-disabled", "trust-tier-insufficient", "composition-impossible",
	"synthesis-error", "contract-not-yours", "contract-revoked",
}

// bookBody is the demo's BOOK /room request body.
func bookBody() map[string]any {
	return map[string]any{"parameters": map[string]any{
		"guest_id": demoGuest, "property_id": demoProperty,
		"check_in": demoCheckIn, "nights": demoNights,
	}}
}

// reserveBody is a Tier B RESERVE /reservations input.
func reserveBody(guest string, nights int) map[string]any {
	return map[string]any{"parameters": map[string]any{
		"guest_id": guest, "property_id": demoProperty, "check_in": demoCheckIn, "nights": nights}}
}

// hdr builds AGTP request headers: agent and scope may be empty (then not
// sent); kv adds more NAME, value pairs.
func hdr(agent, scope string, kv ...string) map[string]string {
	h := map[string]string{}
	if agent != "" {
		h["Agent-ID"] = agent
	}
	if scope != "" {
		h["Authority-Scope"] = scope
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// proposalSemantic is a valid semantic block (RCNS §7.2).
func proposalSemantic() map[string]any {
	return map[string]any{
		"intent": "Book a room for one guest at one property.", "actor": "agent",
		"outcome":    "A reservation exists for the guest at the property.",
		"capability": "transaction", "confidence": 0.8, "impact": "reversible", "is_idempotent": false,
	}
}

// wrappedProposal is the RECOMMENDED PROPOSE parameters form (RCNS §15.2).
func wrappedProposal(method, path string) map[string]any {
	return map[string]any{
		"endpoint": map[string]any{
			"method": method, "path": path,
			"description": "Books a room for the named guest.",
			"semantic":    proposalSemantic(),
			"input_schema": map[string]any{"type": "object", "additionalProperties": false,
				"properties": map[string]any{"guest_id": map[string]any{"type": "string"}}},
			"output_schema": map[string]any{"type": "object"},
		},
		"persistent": false,
	}
}

// legacyProposal is the legacy PROPOSE parameters form (RCNS §15.2).
func legacyProposal(method, path string) map[string]any {
	return map[string]any{"name": "my-booking", "method": method, "path": path, "semantic": proposalSemantic()}
}

// mustJSON encodes v (map keys sorted, so equal values give equal bytes).
func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

var (
	hex64     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	b64url    = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
	synthIDRe = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)
)

var (
	uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	// RateLimit / RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-10).
	rateLimitRe = regexp.MustCompile(`^"([a-z]+)";r=(\d+);t=(\d+)$`)
	linkNextRe  = regexp.MustCompile(`^<([^>]+)>;\s*rel="next"$`)
)
