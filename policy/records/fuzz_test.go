package records

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/caddy-rcns/caddy-rcns/internal/hexid"
	"github.com/gowebpki/jcs"
)

// FuzzParseRecord feeds arbitrary lines to the negotiation log line
// parser: it must never panic, and whatever it accepts must be a
// canonical record whose hash really covers it.
func FuzzParseRecord(f *testing.F) {
	rec := gateRecord(OutcomeAccepted)
	rec["agent_id"] = "A"
	rec["seq"] = 1
	rec["at"] = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	rec["prev"] = ZeroHash
	line, _, err := encodeRecord(rec)
	if err != nil {
		f.Fatal(err)
	}
	good := bytes.TrimSuffix(line, []byte("\n"))
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"agent_id":"A","seq":1e400}`))
	f.Add([]byte(`{"agent_id":"A","agent_id":"B"}`))
	f.Add([]byte("\"\\u2028\""))
	f.Add(bytes.Replace(good, []byte(`"seq":1`), []byte(`"seq":1.5`), 1))
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := parseRecord(line)
		if err != nil {
			return
		}
		if p.agentID == "" || p.seq < 1 || !hexid.Valid(p.prev) || !hexid.Valid(p.hash) {
			t.Fatalf("accepted record with bad fields: %+v", p)
		}
		canon, err := jcs.Transform(line)
		if err != nil || !bytes.Equal(canon, line) {
			t.Fatalf("accepted a line not in JCS form: %q", line)
		}
		again, err := parseRecord(line)
		if err != nil || again != p {
			t.Fatalf("parse not deterministic: %+v vs %+v (%v)", p, again, err)
		}
	})
}

// FuzzInsertHash checks the shortcut Append takes to add "hash" to a
// canonical record against a full RFC 8785 canonicalization.
func FuzzInsertHash(f *testing.F) {
	f.Add([]byte(`{"a":1,"hasi":[{"hash":2}],"z":"}"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"ha\u0001":1,"\u00fc":2,"has":"\""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		canon, err := jcs.Transform(data)
		if err != nil || len(canon) < 2 || canon[0] != '{' {
			return
		}
		var m map[string]any
		if json.Unmarshal(canon, &m) != nil {
			return
		}
		if _, ok := m["hash"]; ok {
			return
		}
		got := insertHash(nil, canon, []byte(ZeroHash))
		m["hash"] = ZeroHash
		want, err := canonical(m)
		if err != nil {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("insertHash(%s) =\n%s\nwant\n%s", canon, got, want)
		}
	})
}
