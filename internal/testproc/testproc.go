// Package testproc holds what the tests' helper processes (a
// redis-server, a sentinel, the OAuth test issuer on node) share: they
// end with the test binary that started them, also when it crashes or
// its -timeout kills it, instead of lingering and holding their ports.
package testproc
