package caddymodule

import "testing"

// TestNativeSocketServingConfiguration: a configuration that starts on a
// socket another one serves is pending (the old one serves) until the
// serving one is released, as Caddy does once the whole new
// configuration has started; a pending one released (its load failed
// while Caddy started its other apps) never serves.
func TestNativeSocketServingConfiguration(t *testing.T) {
	running, failing, next := &AGTPServer{Handler: "running"}, &AGTPServer{Handler: "failing"}, &AGTPServer{Handler: "next"}
	sock := &nativeSocket{servers: []*AGTPServer{running}, pending: map[*AGTPServer]bool{}, changed: make(chan struct{})}
	current := func(when string, want *AGTPServer) {
		t.Helper()
		nativeSockets.Lock()
		got := sock.currentLocked()
		nativeSockets.Unlock()
		if got != want {
			name := func(s *AGTPServer) string {
				if s == nil {
					return "none"
				}
				return s.Handler
			}
			t.Fatalf("%s: %s serves, want %s", when, name(got), name(want))
		}
	}
	step := func(f func()) {
		nativeSockets.Lock()
		defer nativeSockets.Unlock()
		f()
	}
	current("at start", running)
	step(func() { sock.addLocked(failing) })
	current("a reload started its listener", running)
	step(func() { sock.removeLocked(failing) })
	current("that reload failed to start another app", running)
	step(func() { sock.addLocked(next) })
	current("the next reload started its listener", running)
	step(func() { sock.removeLocked(running) })
	current("the old configuration stopped", next)
	step(func() { sock.removeLocked(next) })
	current("the last configuration stopped", nil)
}
