package redisstore

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// manifestWatchRetry is the wait of Client.WatchManifest after its
// subscription failed (Redis does not answer), before subscribing
// again.
const manifestWatchRetry = time.Second

// manifestWatchIdle is how long the watch waits for a message before
// it pings its connection; a ping not answered by the next wait (a
// stalled Redis, a half-open connection) starts a new subscription. A
// variable for tests; 15 s.
var manifestWatchIdle = 15 * time.Second

// manifestChannel is the channel on which the manifest version script
// publishes a new last version (store.ManifestVersions.Version): the
// manifest key's name, in the gateway-wide slot.
func (c *Client) manifestChannel() string { return c.globalKey(manifestKeyName) }

// WatchManifest calls changed each time a node sharing the store gives
// a manifest a new last version (store.ManifestVersions.Version
// publishes it on the manifest's channel: one message per new version,
// to every node, within a round trip), and each time the watch
// subscribes, the first time and again after its connection failed (a
// version given meanwhile was not heard). changed runs on the watch's
// goroutine, one call at a time (a call that takes long delays the
// next). While Redis does not answer, the watch subscribes again each
// manifestWatchRetry (1 s). It returns when ctx is done or the client
// is closed.
//
// The watch speeds up what the host's health check does every 5 s
// (store.ManifestVersions.Current); it is not relied on: a message lost
// (a connection failed between the version and the message) is found by
// that check. One connection per Client, beside its pool; with a Redis
// ACL the user needs SUBSCRIBE and PUBLISH and the channel (docs/cluster.md,
// "Redis settings that matter").
func (c *Client) WatchManifest(ctx context.Context, changed func()) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		c.watchManifestOnce(ctx, changed)
		select {
		case <-ctx.Done():
		case <-time.After(manifestWatchRetry):
		}
	}
}

// watchManifestOnce is one subscription of WatchManifest: it returns
// when ctx is done, or when the subscription failed or its connection
// stopped answering.
func (c *Client) watchManifestOnce(ctx context.Context, changed func()) {
	ps := c.rdb.Subscribe(ctx, c.manifestChannel())
	// A read waiting for a message does not see ctx: closing the
	// subscription ends it.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		_ = ps.Close()
	}()
	pinged := false // a ping was sent and nothing has come since
	for {
		msg, err := ps.ReceiveTimeout(ctx, manifestWatchIdle)
		switch {
		case err == nil:
			pinged = false
			switch msg.(type) {
			case *redis.Subscription, *redis.Message:
				changed()
			}
			continue
		case ctx.Err() != nil:
			return
		case isTimeout(err) && !pinged:
			if ps.Ping(ctx) == nil {
				pinged = true
				continue
			}
		}
		return // failed, or the ping went unanswered: subscribe again
	}
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
