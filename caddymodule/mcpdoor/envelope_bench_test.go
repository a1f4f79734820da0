package mcpdoor

import "testing"

// BenchmarkEnvelopeFault is the envelope rules' pass (envelope.go) over
// the messages that reach it: a 2026-07-28 tools/call (which the fast
// path declines) and a 2025-03-26 batch of four calls.
func BenchmarkEnvelopeFault(b *testing.B) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"1"}}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"2"}}},` +
		`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"3"}}},` +
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fetch_item","arguments":{"item_id":"4"}}}]`
	for _, c := range []struct{ name, body string }{{"call-20260728", call}, {"batch-of-4", batch}} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if f := envelopeFault(body); f != nil {
					b.Fatal(f.message)
				}
			}
		})
	}
}
