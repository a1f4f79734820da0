package integration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// writeEd25519Key writes a fresh PKCS#8 Ed25519 key and returns its path
// and public key.
func writeEd25519Key(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "record-key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pub
}

// TestSignedRecordsAndNegotiationLog: with a record key, every
// Attribution-Record verifies against the manifest's record_keys, the
// Audit-ID chain links consecutive responses, every gate evaluation and
// PROPOSE turn is in the negotiation log, `caddy rcns verify-log`
// accepts the log and names the record a one-byte edit broke.
// Spec §4, §16; ARCHITECTURE.md "Records"; issue 4.
func TestSignedRecordsAndNegotiationLog(t *testing.T) {
	keyPath, pub := writeEd25519Key(t)
	recDir := filepath.Join(t.TempDir(), "records")
	w := startHotel(t, hotelOpts{Mode: "optimistic", Extra: "\t\trecord_keys " + keyPath + "\n\t\trecords_dir " + recDir + "\n\t\tfsync always"})

	// The manifest publishes the key.
	man := w.GW.Do(t, "DISCOVER", "/", nil, nil)
	wantStatus(t, man, 200)
	keys, _ := json.Marshal(field(man.Object(t), "server", "record_keys"))
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(keys, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("server.record_keys = %s (%v), want one JWK", keys, err)
	}
	if got, ok := set.Keys[0].Key.(ed25519.PublicKey); !ok || !bytes.Equal(got, pub) {
		t.Fatalf("published key %v is not the configured one", set.Keys[0].Key)
	}

	a1 := agentID("rcns-demo-agent")
	r1 := w.book(t, a1, "rcns:negotiate, hotel:read, hotel:book", "Allow-RCNS", "true")
	wantStatus(t, r1, 263)
	r2 := w.GW.Do(t, "BOOK", "/nowhere", hdr(a1, "rcns:negotiate", "Allow-RCNS", "true"), nil)
	wantStatus(t, r2, 464)
	noscope := w.book(t, agentID("rcns-demo-noscope"), "hotel:read, hotel:book", "Allow-RCNS", "true")
	wantStatus(t, noscope, 262)

	for i, r := range []*Resp{r1, r2} {
		compact := r.Header.Get("Attribution-Record")
		sig, err := jose.ParseSignedCompact(compact, []jose.SignatureAlgorithm{jose.EdDSA})
		if err != nil {
			t.Fatalf("response %d: Attribution-Record is not an EdDSA JWS: %v", i, err)
		}
		if sig.Signatures[0].Header.KeyID != set.Keys[0].KeyID {
			t.Fatalf("response %d: kid %q, want %q", i, sig.Signatures[0].Header.KeyID, set.Keys[0].KeyID)
		}
		if _, err := sig.Verify(pub); err != nil {
			t.Fatalf("response %d: signature does not verify: %v", i, err)
		}
	}
	if prev := str(attribution(t, r2), "previous_audit_id"); prev != r1.Header.Get("Audit-ID") {
		t.Fatalf("previous_audit_id = %s, want the prior Audit-ID %s", prev, r1.Header.Get("Audit-ID"))
	}

	// The log holds the three gate evaluations, requested and granted.
	logDir := filepath.Join(recDir, "negotiations")
	files, _ := filepath.Glob(filepath.Join(logDir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("negotiation log files = %v, want one", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 {
		t.Fatalf("negotiation log has %d records, want 3:\n%s", len(lines), raw)
	}
	var recs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		recs = append(recs, m)
	}
	if recs[0]["outcome"] != "accepted" || str(recs[0], "granted", "synthesis_id") != r1.Header.Get("Contract-Synthesized") || str(recs[0], "requested", "path") != "/room" {
		t.Errorf("first record = %v, want accepted with the synthesis id", recs[0])
	}
	if recs[1]["outcome"] != "refused" || recs[1]["reason"] != "composition-impossible" || recs[1]["granted"] != nil {
		t.Errorf("second record = %v, want refused composition-impossible", recs[1])
	}
	if recs[2]["agent_id"] != agentID("rcns-demo-noscope") || recs[2]["reason"] != "scope-required" {
		t.Errorf("third record = %v, want noscope's scope-required refusal", recs[2])
	}
	if recs[1]["prev"] != recs[0]["hash"] {
		t.Errorf("A1's second record prev %v != first record hash %v", recs[1]["prev"], recs[0]["hash"])
	}

	out, err := exec.Command(caddyBin, "rcns", "verify-log", logDir).CombinedOutput()
	if err != nil {
		t.Fatalf("verify-log on an intact log failed: %v\n%s", err, out)
	}

	// One byte changed in the second record: verify-log names it.
	tampered := filepath.Join(t.TempDir(), "negotiations")
	if err := os.MkdirAll(tampered, 0o755); err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), `"composition-impossible"`, `"composition-impossiblE"`, 1)
	if edited == string(raw) {
		t.Fatal("tamper target not found")
	}
	if err := os.WriteFile(filepath.Join(tampered, filepath.Base(files[0])), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(caddyBin, "rcns", "verify-log", tampered).CombinedOutput()
	if err == nil {
		t.Fatalf("verify-log accepted a tampered log:\n%s", out)
	}
	if !strings.Contains(string(out), filepath.Base(files[0])) || !regexp.MustCompile(`\b2\b`).Match(out) {
		t.Fatalf("verify-log output does not name the file and line 2:\n%s", out)
	}
}

// TestRecordsDirSharedByTwoGateways: two Caddy processes configured with
// the same records_dir (as two gateways without a name share
// <caddy data dir>/rcns/default). The first to serve holds the directory;
// the second logs that another gateway (by pid) holds it, serves on
// without durable records and writes nothing there, so with requests
// alternating between the two every hash chain stays intact and
// verify-log works while the holder is live. Before the lock, the second
// continued the chains from its own heads: verify-log failed with
// "seq 3, want 4".
func TestRecordsDirSharedByTwoGateways(t *testing.T) {
	recDir := filepath.Join(t.TempDir(), "records")
	up := startCounter(t)
	site := fill(hotelSite, "ENABLED", "true", "MODE", "optimistic", "HOTEL", up.URL,
		"EXTRA", "\t\trecords_dir "+recDir+"\n\t\tfsync always", "LEGACY", up.URL)
	first, second := startGateway(t, site), startGateway(t, site)

	const rounds = 3
	for i := 0; i < rounds; i++ {
		for _, g := range []*Gateway{first, second} {
			r := g.Do(t, "BOOK", "/room", hdr(agentA2, "hotel:read, hotel:book", "Allow-RCNS", "true"), bookBody())
			wantStatus(t, r, 262)
		}
	}

	want := fmt.Sprintf("is held by another gateway (pid %d on host ", first.proc.cmd.Process.Pid)
	if out := second.Output(); !strings.Contains(out, "opening records_dir failed") || !strings.Contains(out, want) ||
		!strings.Contains(out, "each gateway needs its own records_dir") {
		t.Fatalf("the second gateway did not log that the first (%s) holds records_dir; output:\n%s", want, out)
	}
	if strings.Contains(first.Output(), "opening records_dir failed") {
		t.Fatalf("the first gateway could not open records_dir:\n%s", first.Output())
	}

	out, err := exec.Command(caddyBin, "rcns", "verify-log", recDir).CombinedOutput()
	if err != nil {
		t.Fatalf("verify-log on the shared records_dir failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("1 chain, %d records", rounds)) {
		t.Fatalf("verify-log: %s; want the first gateway's %d records only", out, rounds)
	}
}

// TestMetricsSurviveReload: the gateway's Prometheus series are on
// Caddy's registry (admin /metrics), move with traffic, and a config
// reload neither panics nor duplicates series. Issue 6.
func TestMetricsSurviveReload(t *testing.T) {
	w := startHotel(t, hotelOpts{Mode: "optimistic"})
	a1 := agentID("rcns-demo-agent")
	wantStatus(t, w.book(t, a1, "rcns:negotiate, hotel:read, hotel:book", "Allow-RCNS", "true"), 263)
	wantStatus(t, w.GW.Do(t, "BOOK", "/nowhere", hdr(a1, "rcns:negotiate", "Allow-RCNS", "true"), nil), 464)

	scrape := func() string {
		resp, err := http.Get(w.GW.AdminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("admin /metrics = %d", resp.StatusCode)
		}
		return string(b)
	}
	m := scrape()
	for _, want := range []string{
		`caddy_rcns_gate_evaluations_total{outcome="accepted",reason="none"} 1`,
		`caddy_rcns_gate_evaluations_total{outcome="refused",reason="composition-impossible"} 1`,
		`caddy_rcns_syntheses_total{mode="optimistic",outcome="executed",recipe="book-room"} 1`,
		`caddy_rcns_active_contracts 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, a1) {
		t.Error("metrics carry an Agent-ID label value")
	}

	// Reload the same config through the admin API (forced, and the
	// client's idle connections to the old server dropped).
	if status, body := reload(t, w.GW, w.GW.Caddyfile); status != 200 {
		t.Fatalf("reload = %d: %s", status, body)
	}
	wantStatus(t, w.GW.Do(t, "BOOK", "/nowhere", hdr(a1, "rcns:negotiate", "Allow-RCNS", "true"), nil), 464)
	m = scrape()
	if n := strings.Count(m, "# TYPE caddy_rcns_gate_evaluations_total counter"); n != 1 {
		t.Fatalf("gate evaluation family appears %d times after reload", n)
	}
	if !strings.Contains(m, `caddy_rcns_active_contracts 1`) {
		t.Errorf("active contracts gauge not restored after reload:\n%s", grepLines(m, "caddy_rcns_active"))
	}
	if strings.Contains(w.GW.Output(), "panic") {
		t.Fatalf("caddy panicked:\n%s", w.GW.Output())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNegotiationLogFileRemovedUnderGateway: the negotiation log file a
// running gateway writes, removed under it, is found at the next
// record's fsync: the records it held, read back from the file the
// gateway holds open, and that record go into a new file, and the
// gateway's log says so at ERROR naming both files (before, the records
// went to the unlinked file and were lost; then those before the last
// check were); verify-log then passes. Over the suite's door and, in
// the HTTP door's pass, the MCP door (a tools/call the gate answers
// with its preview writes the same record).
func TestNegotiationLogFileRemovedUnderGateway(t *testing.T) {
	doors := []string{suiteDoor}
	if suiteDoor == "http" {
		doors = append(doors, "mcp")
	}
	for _, door := range doors {
		t.Run(door, func(t *testing.T) {
			recDir := filepath.Join(t.TempDir(), "records")
			up := startCounter(t)
			mode := "optimistic"
			if door == "mcp" {
				mode = "confirm-first"
			}
			g := startGateway(t, fill(hotelSite, "ENABLED", "true", "MODE", mode, "HOTEL", up.URL,
				"EXTRA", "\t\trecords_dir "+recDir+"\n\t\tfsync group\n\t\tmcp", "LEGACY", up.URL))
			var book func()
			switch door {
			case "mcp": // the gate's 461 preview, which calls no step
				c := mcpConnect(t, g, "/mcp", agentA1, scopeAll)
				book = func() {
					t.Helper()
					if r := c.call(t, "book-room", bookArgs(), nil); r.res.IsError || r.outcome() != "preview" {
						t.Fatalf("book-room: %v, want the gate's 461 preview", r.structured)
					}
				}
			default:
				book = func() {
					t.Helper()
					wantStatus(t, g.Do(t, "BOOK", "/room", hdr(agentA2, "hotel:read, hotel:book", "Allow-RCNS", "true"), bookBody()), 262)
				}
			}
			book()
			book()
			logs, _ := filepath.Glob(filepath.Join(recDir, "negotiations", "*.jsonl"))
			if len(logs) != 1 {
				t.Fatalf("log files %v, want one", logs)
			}
			before, err := os.ReadFile(logs[0])
			if err != nil {
				t.Fatal(err)
			}
			seq := strings.Count(string(before), "\n") // the agent's last seq: one chain in the file (MCP initialize writes one too)
			if err := os.Remove(logs[0]); err != nil {
				t.Fatal(err)
			}
			book()
			book()
			out := g.Output()
			if !strings.Contains(out, "negotiation log file moved under the gateway") || !strings.Contains(out, logs[0]+" was removed, moved, replaced or copied over") {
				t.Fatalf("no ERROR naming %s; output:\n%s", logs[0], out)
			}
			after, _ := filepath.Glob(filepath.Join(recDir, "negotiations", "*.jsonl"))
			if len(after) != 1 || after[0] == logs[0] {
				t.Fatalf("log files after the removal %v, want one new file", after)
			}
			data, err := os.ReadFile(after[0])
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int
			for _, ln := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				var rec struct{ Seq int }
				if err := json.Unmarshal([]byte(ln), &rec); err != nil {
					t.Fatalf("%s: %v", after[0], err)
				}
				seqs = append(seqs, rec.Seq)
			}
			var want []int
			for i := 1; i <= seq+2; i++ {
				want = append(want, i)
			}
			if fmt.Sprint(seqs) != fmt.Sprint(want) {
				t.Fatalf("%s holds the records seq %v, want %v: those the removed file held, then the 2 after:\n%s", after[0], seqs, want, data)
			}
			if !bytes.HasPrefix(data, before) {
				t.Fatalf("%s does not begin with what the removed file held", after[0])
			}
			if vout, err := exec.Command(caddyBin, "rcns", "verify-log", recDir).CombinedOutput(); err != nil {
				t.Fatalf("verify-log: %v\n%s\nwant it to pass: nothing lost", err, vout)
			}
		})
	}
}
