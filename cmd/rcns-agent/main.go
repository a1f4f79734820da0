// Command rcns-agent is the agent side of the gateway's `signature`
// identity mode: it makes keys, computes Agent-IDs and keyids, and
// sends signed AGTP requests (RFC 9421 via policy/httpsig).
//
// Usage:
//
//	rcns-agent keygen -alg ed25519|ecdsa-p256-sha256 -out key.pem
//	rcns-agent id genesis.json
//	rcns-agent thumbprint -key key.pem
//	rcns-agent call -key key.pem -agent-id ID [-scope S] [-allow-rcns]
//	        [-idempotency-key K] [-contract ID] [-H 'Name: v']...
//	        [-timeout 30s] METHOD URL [JSON-BODY]
//
// keygen writes a new PKCS#8 PEM private key (mode 0600, never over an
// existing file) and prints two lines: "keyid <thumbprint>" and
// "jwk <public JWK>", the key to put in the agent document. id prints
// the Agent-ID of an Agent Genesis document: lowercase hex SHA-256 of
// its RFC 8785 (JCS) form without the top-level "signature" member.
// thumbprint prints the keyid (RFC 7638 SHA-256 thumbprint) of a key.
// call sends METHOD URL signed under label sig1 with created=now,
// expires=now+60s and a random nonce, covering the profile's default
// components; a JSON-BODY is sent as application/json with a
// Content-Digest. It prints the status line, the response header fields
// (sorted) and the body.
//
// Exit status: 0 on success (for call: any HTTP response), 1 on
// failure, 2 on a usage error.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
