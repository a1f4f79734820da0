package engine

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
	"github.com/gowebpki/jcs"
)

// TestSynthesisBytesMatchReference pins, byte for byte, what a gate
// synthesis (g) writes that an agent or a verifier reads, against
// reference encoders independent of the hand-written ones the hot path
// uses (the ids and clock readings are fresh each run, so the reference
// is recomputed from the answer's own values rather than stored):
//
//   - contract_hash: sha256 of gowebpki/jcs over {"endpoint","recipe_lineage"}
//     of the 263 body (spec §16.3);
//   - the Attribution-Record: payload bytes as encoding/json writes the
//     decoded payload (no HTML escaping), header as encoding/json writes
//     {alg,kid,typ}, signature equal to crypto/ed25519's, Audit-ID its sha256;
//   - the negotiation record: its line in the JCS form jcs.Transform gives,
//     hash and chain checked by records.VerifyDirStats (what verify-log runs);
//   - the rcns_propose_accepted lifecycle envelope (signed when INSPECT
//     first reads it): the same three checks as the Attribution-Record.
//
// Signed (Ed25519 record key) and unsigned (alg none).
func TestSynthesisBytesMatchReference(t *testing.T) {
	for _, signed := range []bool{false, true} {
		name := "none"
		if signed {
			name = "ed25519"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var priv ed25519.PrivateKey
			adjust := []func(*Config){func(c *Config) { c.RecordsDir = dir }}
			if signed {
				adjust = append(adjust, withRecordKey(t))
			}
			te := newTestEngine(t, adjust...)
			if signed {
				k, err := records.LoadEd25519Key(te.RecordKeys[0])
				if err != nil {
					t.Fatal(err)
				}
				priv = k
			}
			var prevAudit string
			for _, path := range []string{"/item/pin-1", "/item/pin-2"} {
				a := te.do(t, "LOOKUP", path, map[string]any{"parameters": map[string]any{"item_id": "1"}}, "Allow-RCNS", "true")
				if a.Status != 263 {
					t.Fatalf("LOOKUP %s = %s", path, a)
				}
				// contract_hash (spec §16.3), from the body's own endpoint and lineage.
				var body struct {
					Endpoint     json.RawMessage `json:"endpoint"`
					Lineage      json.RawMessage `json:"recipe_lineage"`
					ContractHash string          `json:"contract_hash"`
					SynthesisID  string          `json:"synthesis_id"`
				}
				if err := json.Unmarshal(a.Body, &body); err != nil {
					t.Fatal(err)
				}
				in := []byte(`{"endpoint":` + string(body.Endpoint) + `,"recipe_lineage":` + string(body.Lineage) + `}`)
				canon, err := jcs.Transform(in)
				if err != nil {
					t.Fatal(err)
				}
				if sum := sha256.Sum256(canon); hex.EncodeToString(sum[:]) != body.ContractHash {
					t.Errorf("contract_hash %s is not sha256(JCS(endpoint, recipe_lineage))", body.ContractHash)
				}
				// The 263 body: encoding/json's form of its own decoding
				// (HTML-escaped, keys sorted), the endpoint in its JCS bytes.
				if !bytes.Contains(a.Body, body.Endpoint) || !bytes.Equal(body.Endpoint, mustJCS(t, body.Endpoint)) {
					t.Errorf("endpoint is not written in its canonical bytes: %s", body.Endpoint)
				}
				// Attribution-Record.
				rec := a.header("Attribution-Record")
				payload := checkJWS(t, rec, priv, records.TypAttribution, te.signer.KeyID())
				if got := a.header("Audit-ID"); got != records.AuditID(rec) {
					t.Errorf("Audit-ID %s is not sha256 of the record", got)
				}
				if payload["contract_hash"] != body.ContractHash || payload["synthesis_id"] != body.SynthesisID {
					t.Errorf("record payload %v does not name the contract", payload)
				}
				if prevAudit != "" && payload["previous_audit_id"] != prevAudit {
					t.Errorf("previous_audit_id %v, want %s", payload["previous_audit_id"], prevAudit)
				}

				// The lifecycle envelope.
				lc := te.do(t, "INSPECT", "/?target=lifecycle&limit=1", nil)
				if lc.Status != 200 {
					t.Fatalf("INSPECT lifecycle = %s", lc)
				}
				if p := checkJWS(t, lc.header("Attribution-Record"), priv, records.TypAttribution, te.signer.KeyID()); p["previous_audit_id"] != a.header("Audit-ID") {
					t.Errorf("INSPECT's previous_audit_id %v, want %s", p["previous_audit_id"], a.header("Audit-ID"))
				}
				prevAudit = lc.header("Audit-ID") // the chain goes on through the INSPECT answer
				var got struct {
					Entries []struct {
						Envelope  string `json:"envelope"`
						AuditID   string `json:"audit_id"`
						EventType string `json:"event_type"`
					} `json:"entries"`
				}
				if err := json.Unmarshal(lc.Body, &got); err != nil || len(got.Entries) != 1 {
					t.Fatalf("lifecycle body %s: %v", lc.Body, err)
				}
				e := got.Entries[0]
				ev := checkJWS(t, e.Envelope, priv, records.TypLifecycle, te.signer.KeyID())
				if e.AuditID != records.AuditID(e.Envelope) || e.EventType != records.EventProposeAccepted ||
					ev["synthesis_id"] != body.SynthesisID || ev["path"] != path || ev["contract_hash"] != body.ContractHash {
					t.Errorf("lifecycle entry %+v, payload %v", e, ev)
				}
			}
			// Negotiation records: every line JCS, hashes and chain whole.
			te.Close()
			logs := filepath.Join(dir, "negotiations")
			st, err := records.VerifyDirStats(logs)
			if err != nil || st.Records != 2 {
				t.Fatalf("VerifyDirStats: %v, %+v", err, st)
			}
			files, _ := filepath.Glob(filepath.Join(logs, "*"))
			n := 0
			for _, f := range files {
				raw, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for line := range bytes.Lines(raw) {
					line = bytes.TrimSuffix(line, []byte("\n"))
					if len(line) == 0 || line[0] != '{' {
						continue
					}
					n++
					if !bytes.Equal(line, mustJCS(t, line)) {
						t.Errorf("negotiation line is not JCS: %s", line)
					}
				}
			}
			if n != 2 {
				t.Errorf("%d negotiation lines, want 2", n)
			}
		})
	}
}

func mustJCS(t *testing.T, raw []byte) []byte {
	t.Helper()
	out, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkJWS checks compact against reference encoders: the header as
// encoding/json writes it, the payload re-encoded by encoding/json
// (SetEscapeHTML(false)) to the same bytes, and the signature equal to
// crypto/ed25519's (priv nil: alg none, empty signature). It returns
// the payload.
func checkJWS(t *testing.T, compact string, priv ed25519.PrivateKey, typ, kid string) map[string]any {
	t.Helper()
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS Compact: %q", compact)
	}
	var head []byte
	if priv != nil {
		head, _ = json.Marshal(struct {
			Alg string `json:"alg"`
			Kid string `json:"kid"`
			Typ string `json:"typ"`
		}{"EdDSA", kid, typ})
	} else {
		head, _ = json.Marshal(struct {
			Alg string `json:"alg"`
			Typ string `json:"typ"`
		}{"none", typ})
	}
	b64 := base64.RawURLEncoding
	if parts[0] != b64.EncodeToString(head) {
		t.Errorf("header %s, want %s", parts[0], head)
	}
	raw, err := b64.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&payload); err != nil {
		t.Fatal(err)
	}
	var ref bytes.Buffer
	enc := json.NewEncoder(&ref)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(payload); err != nil {
		t.Fatal(err)
	}
	if want := bytes.TrimSuffix(ref.Bytes(), []byte("\n")); !bytes.Equal(raw, want) {
		t.Errorf("payload\n%s\nis not encoding/json's\n%s", raw, want)
	}
	wantSig := ""
	if priv != nil {
		wantSig = b64.EncodeToString(ed25519.Sign(priv, []byte(parts[0]+"."+parts[1])))
	}
	if parts[2] != wantSig {
		t.Errorf("signature %q, want crypto/ed25519's %q", parts[2], wantSig)
	}
	return payload
}
