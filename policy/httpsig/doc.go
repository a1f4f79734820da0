// Package httpsig signs and verifies AGTP requests with HTTP Message
// Signatures (RFC 9421), the `signature` identity mode of the gateway.
//
// Agents import it to sign: load a key ([LoadPrivateKey]), compute its
// keyid ([Thumbprint], RFC 7638), set the body digest
// ([SetContentDigest], RFC 9530) and call [Signer.Sign]. The gateway
// calls [Verify] with a [KeyResolver] over the agent registry and a
// [ReplayCache].
//
// Profile (ARCHITECTURE.md "Identity"):
//
//   - algorithms "ed25519" (RFC 9421 §3.3.6) and "ecdsa-p256-sha256"
//     (§3.3.4, raw r||s, 64 bytes); nothing else is accepted;
//   - keyid is the RFC 7638 SHA-256 JWK thumbprint of the public key,
//     base64url without padding;
//   - covered components are [DefaultComponents]: "@method"
//     "@authority" "@path" "agent-id", plus "@query", "content-digest",
//     "content-type" and the AGTP request headers whenever present;
//   - created and expires are required, expires-created is at most
//     300 s and created lies within ±60 s of the verifier's clock;
//   - a signature is accepted once ([ReplayCache]);
//   - when [VerifyOptions.Authorities] is set, @authority must be one of
//     the verifier's own authorities, so a signature made for another
//     server that trusts the same key is refused.
//
// The signature base (RFC 9421 §2.5) is built here, from the request
// alone; it is tested against RFC 9421 Appendix B.2.4 and B.2.6.
// Component identifiers carrying parameters (";sf", ";key", ";bs",
// ";req", ";tr", ";name") and "@query-param" are not supported and make
// signing and verification fail.
package httpsig
