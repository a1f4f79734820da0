// Package policy decides who may do what at the AGTP gateway: the method
// catalog and method policy (RCNS §5), the path grammar and route table
// (RCNS §6), Authority-Scope parsing and wildcard matching (RCNS §3,
// §11.4), the agent registry and caller identity (RCNS §3, §10 step 6) and
// the four-lock RCNS gate (RCNS §11).
//
// Every refusal that is meant to reach the wire is a *Refusal carrying the
// status, reason token, explanation and extra body fields of the uniform
// error body (RCNS §19, OP-28). Configuration problems are plain errors
// that name the offending entry; the caller refuses to start on them.
//
// The package imports only the standard library. Paths handed to it are
// always the escaped form of the request path (what
// (*url.URL).EscapedPath returns), without the query.
package policy
