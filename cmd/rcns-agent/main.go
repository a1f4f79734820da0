// Command rcns-agent is the agent side of the gateway's `signature`
// identity mode: it makes keys, computes Agent-IDs and keyids, and
// sends signed AGTP requests (RFC 9421 via policy/httpsig).
//
// Usage:
//
//	rcns-agent keygen -alg ed25519|ecdsa-p256-sha256 -out key.pem
//	rcns-agent id genesis.json
//	rcns-agent thumbprint -key key.pem
//	rcns-agent call [-key key.pem] -agent-id ID [-scope S] [-allow-rcns]
//	        [-idempotency-key K] [-contract ID] [-H 'Name: v']...
//	        [-timeout 30s] [-cacert ca.pem] [-cert c.pem -cert-key k.pem]
//	        [-insecure-plaintext] METHOD URL [JSON-BODY]
//	rcns-agent key inspect|release|resolve [call flags] -for AGENT-ID
//	        -target-key KEY [-reason TEXT] [-status N] [-result JSON] URL
//	rcns-agent verify-record -keys keys.json RECORD|-
//
// keygen writes a new PKCS#8 PEM private key (mode 0600, never over an
// existing file) and prints two lines: "keyid <thumbprint>" and
// "jwk <public JWK>", the key to put in the agent document. id prints
// the Agent-ID of an Agent Genesis document: lowercase hex SHA-256 of
// its RFC 8785 (JCS) form without the top-level "signature" member.
// thumbprint prints the keyid (RFC 7638 SHA-256 thumbprint) of a key.
// key is the operator's tool for one agent's Idempotency-Key (the
// caller needs inspect:all, the default -scope): inspect sends INSPECT
// target=idempotency-key, release and resolve REVOKE
// target=idempotency-key with that action (docs/cluster.md "Failure
// modes"); it takes call's flags and prints the answer as call does.
// call sends METHOD URL signed under label sig1 with created=now,
// expires=now+60s and a random nonce, covering the profile's default
// components; a JSON-BODY is sent as application/json with a
// Content-Digest. Without -key the request is sent unsigned, for a
// gateway under `identity header` or `identity mtls`, where nothing is
// signed. It prints the status line, the response header fields
// (sorted, in AGTP spelling) and the body.
// verify-record checks an Attribution-Record's EdDSA signature against
// the gateway's published record keys: keys.json is a JWK set or the
// manifest (the DISCOVER / body, whose server.record_keys it uses);
// RECORD is the JWS compact form, or - for standard input holding the
// record or the output of call (its Attribution-Record line). It prints
// the kid, the Audit-ID and the record's payload.
//
// URL is http:// or https:// (the HTTP binding, spec §2.3), or agtp://
// or agtps:// (the native AGTP/1.0 wire, spec §2.1; port 4480 unless
// the URL names one). agtps:// is TLS 1.3 only with ALPN "agtp";
// agtp:// is plain text and goes only to a loopback address unless
// -insecure-plaintext is given. On the native wire the request line
// carries the URL's path and query, Host its host[:port], and the
// signature covers the same components as over HTTP: @authority is the
// Host header (port 4480 dropped), @path and @query come from the
// request line; the status line shows the AGTP reason phrase the
// server sent ("AGTP/1.0 263 Proposal Approved"). -cacert replaces the
// system roots for https:// and agtps://; -cert and -cert-key present a
// client certificate (mTLS).
//
// Exit status, as curl --fail treats HTTP errors (call prints the
// answer in every case):
//
//	0  success; for call, a 2xx answer other than 262 (200, 263 …)
//	1  failure without an answer: connection, TLS, timeout, a bad file
//	2  usage error
//	3  call got 461 RCNS Contract Available: a confirm-first preview,
//	   nothing ran (present the contract with -contract to run it)
//	4  call got any other answer: 262, 3xx, 4xx (404, 422, 459–464 …),
//	   5xx
//
// verify-record exits 0 when the signature verifies and 1 when it does
// not (an unsigned record, an unknown kid, a changed record, a bad file).
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
