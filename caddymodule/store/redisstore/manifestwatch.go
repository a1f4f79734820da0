package redisstore

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// manifestWatchRetry is the wait of Client.WatchManifest after its
// subscription failed (Redis does not answer), before subscribing
// again; manifestWatchRefusedRetry the wait after Redis refused it (an
// ACL without the channel), as long as the health check's interval,
// which rebuilds the manifest meanwhile: no new connection each second.
const (
	manifestWatchRetry        = time.Second
	manifestWatchRefusedRetry = 5 * time.Second
)

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
// manifestWatchRetry (1 s); while it refuses, each
// manifestWatchRefusedRetry (5 s). It returns when ctx is done or the
// client is closed.
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
	refused := "" // the refusal logged, until a subscription succeeds
	for ctx.Err() == nil {
		err := c.watchManifestOnce(ctx, changed)
		wait := manifestWatchRetry
		var rerr redis.Error
		switch {
		case err == nil:
			refused = ""
		case errors.As(err, &rerr):
			// Redis answered, and refused (an ACL without SUBSCRIBE or
			// the channel): said once. An outage is the health check's
			// to log.
			wait = manifestWatchRefusedRetry
			if err.Error() != refused && c.log != nil {
				c.log.Warn("store redis: the manifest watch was refused; another node's persistent synthesis reaches this node's manifest at its next health check (within 5 s) instead of at once. Grant SUBSCRIBE and PUBLISH on the channel (docs/cluster.md, Redis settings that matter)",
					zap.String("channel", c.manifestChannel()), zap.Error(err))
			}
			refused = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// watchManifestOnce is one subscription of WatchManifest: it returns
// when ctx is done, or when the subscription failed or its connection
// stopped answering. The error is the failure, nil after a subscription
// that Redis confirmed.
func (c *Client) watchManifestOnce(ctx context.Context, changed func()) (err error) {
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
	pinged := false     // a ping was sent and nothing has come since
	subscribed := false // Redis confirmed the subscription
	for {
		msg, err := ps.ReceiveTimeout(ctx, manifestWatchIdle)
		switch {
		case err == nil:
			pinged = false
			switch msg.(type) {
			case *redis.Subscription:
				subscribed = true
				changed()
			case *redis.Message:
				changed()
			}
			continue
		case ctx.Err() != nil:
			return nil
		case isTimeout(err) && !pinged:
			if ps.Ping(ctx) == nil {
				pinged = true
				continue
			}
		}
		if subscribed {
			return nil // the connection failed or went silent: subscribe again
		}
		return err
	}
}

// isTimeout reports whether err is a read that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
