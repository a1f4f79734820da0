// Package records writes what the AGTP gateway did, in three forms
// (ARCHITECTURE.md "Records"):
//
//   - Attribution-Records (RCNS §4, §16): a JWS Compact string per
//     response, signed EdDSA with the first configured Ed25519 key (kid =
//     RFC 7638 JWK thumbprint), or the unsigned `alg: none` form when no
//     key is configured; Audit-ID is the lowercase hex SHA-256 of the
//     compact string. [Signer] signs, [Chains] links each agent's records
//     through previous_audit_id (OP-22), [Verify] checks a record against
//     the published key set.
//   - The negotiation log (seed 003, seed 002 §8): JSON Lines files, one
//     hash chain per agent, each record saying what was requested and what
//     was granted. [Log] appends with a configurable fsync policy and
//     continues the chains across restarts; [VerifyDir] checks them.
//   - The lifecycle stream (RCNS §18): signed rcns_* events kept in memory
//     per agent, newest first ([Lifecycle]).
//
// The package imports only the standard library, go-jose/v4,
// gowebpki/jcs and policy/httpsig (for the one RFC 7638 thumbprint); it
// knows nothing of Caddy. Every type is safe for
// concurrent use unless its documentation says otherwise.
package records
