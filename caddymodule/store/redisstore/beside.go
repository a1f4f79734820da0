package redisstore

// A mint's writes outside the agent's slot (docs/cluster.md "Round trips
// per request kind"): the owner index P{o:ID} and, in Cluster mode, the
// global live index P{g}:cl, written beside the mint's script; their
// undoing when the script did not mint; the release of a contract
// minted while they failed; and the node-local hint of the pairs a
// contract serves, so that those writes are not sent for them.

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/recipes"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// servedKey is the served cache's key of (agent, method, path).
func servedKey(agent, method, path string) string { return agent + "\x00" + method + " " + path }

// servedHint reports whether this node saw a live contract serve the
// pair lately (Cluster mode; false elsewhere). It is a hint: a contract
// revoked on another node leaves it set until its expiry, and then a
// gate synthesis costs its mint's own round trip (MintForPair).
func (s *contracts) servedHint(agent, method, path string) bool {
	_, ok := s.served.Get(servedKey(agent, method, path)) // a miss without a cache (outside Cluster mode)
	return ok
}

// noteServed records that a contract expiring at exp serves the pair
// (gone: no longer).
func (s *contracts) noteServed(agent, method, path string, exp time.Time, gone bool) {
	if s.served == nil {
		return
	}
	k := servedKey(agent, method, path)
	if ttl := time.Until(exp); !gone && ttl > 0 {
		s.served.SetWithTTL(k, struct{}{}, 1, ttl)
	} else {
		s.served.Del(k)
	}
}

// besideMint is a mint's owner index write, sent beside its script in
// one pipeline outside Cluster mode (one connection: Redis runs them in
// order). In Cluster mode, where the owner index and the global live
// index are other slots, startBeside sends them.
func (s *contracts) besideMint(ctx context.Context, c *recipes.Contract, m mintCall) func(redis.Pipeliner) {
	return func(p redis.Pipeliner) {
		p.Set(ctx, s.ownerKey(c.SynthesisID), c.OriginatingAgentID, 0)
		p.PExpireAt(ctx, s.ownerKey(c.SynthesisID), time.UnixMilli(mustInt(m.keep)))
	}
}

// besideScript is one of a mint's writes in another slot (Cluster mode:
// startBeside), made only when it reaches Redis by the mint's deadline,
// as the mint's script is: a write a stalled node runs late cannot land
// after the undoing that followed its failure. KEYS: the key. ARGV:
// deadline (Unix ms on Redis's clock, 0: none), "o" (the owner index:
// SET KEYS[1] ARGV[3] PXAT ARGV[4]) or "g" (the global live index: ZADD
// KEYS[1] ARGV[3] ARGV[4]). Returns 1 written, 0 late (nothing written).
var besideScript = denyOOM(`
local dl = tonumber(ARGV[1])
if dl > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > dl then return 0 end
end
if ARGV[2] == 'o' then
  redis.call('SET', KEYS[1], ARGV[3], 'PXAT', ARGV[4])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
end
return 1
`)

// errBesideLate is a write of besideScript that reached Redis past its
// deadline and wrote nothing.
var errBesideLate = errors.New("a write beside the mint reached Redis after its deadline and wrote nothing")

// besideCall is the outcome of a mint's writes in other slots (the
// owner index, the global live index) sent in Cluster mode concurrently
// with its script (startBeside).
type besideCall chan error

// startBeside sends c's writes in other slots (besideScript: the owner
// index and the global live index, each on its node) on their own
// timeout, not the caller's, so that a caller whose script did not mint
// does not wait for them; a write that reaches Redis after deadline
// (the mint's) writes nothing. Once the call is done (besideCall), what
// it wrote is final: an undoing after it is not overtaken. A panic in
// the writes (a defect) is recovered, logged at ERROR, and is the
// call's error: the mint is then handled as one whose other writes
// failed (finishBeside), and the process goes on.
func (s *contracts) startBeside(ctx context.Context, c *recipes.Contract, m mintCall, deadline int64) besideCall {
	b := make(besideCall, 1)
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.cfg.WriteTimeout+s.c.cfg.ReadTimeout)
	writes := [2]struct {
		key  string
		args []any
	}{
		{s.ownerKey(c.SynthesisID), []any{deadline, "o", c.OriginatingAgentID, m.keep}},
		{s.c.globalKey("cl"), []any{deadline, "g", c.ExpiresAt.UnixMilli(), m.member}},
	}
	go func() {
		defer cancel()
		var err error
		defer func() { b <- err }()
		defer recovered.IntoLog(&err, s.c.log, "panic writing a contract's indexes beside its mint; the mint counts as failed",
			zap.String("agent_id", c.OriginatingAgentID), zap.String("synthesis_id", c.SynthesisID))
		if h := testHookBeside.Load(); h != nil {
			(*h)()
		}
		var cmds [2]*redis.Cmd
		_, _ = s.c.rdb.Pipelined(bctx, func(p redis.Pipeliner) error {
			for i, w := range writes {
				cmds[i] = besideScript.EvalSha(bctx, p, []string{w.key}, w.args...)
			}
			return nil
		})
		for i, cmd := range cmds {
			if cerr := cmd.Err(); cerr != nil && strings.HasPrefix(cerr.Error(), "NOSCRIPT") {
				cmd = besideScript.Run(bctx, s.c.rdb, []string{writes[i].key}, writes[i].args...)
			}
			switch n, cerr := cmd.Int64(); {
			case cerr != nil:
				err = cmp.Or(err, cerr)
			case n != 1:
				err = cmp.Or(err, errBesideLate)
			}
		}
	}()
	return b
}

// testHookBeside, set by tests only (nil otherwise), runs in
// startBeside's goroutine before its writes: a fault injected there.
// Atomic: the test sets it while the store's goroutines run.
var testHookBeside atomic.Pointer[func()]

// finishBeside settles b once the script's call returned (minted: it
// stored c; scriptErr: its error). Minted, it waits for b and returns
// its error, having released c (the caller answers 503). Otherwise it
// returns nil at once and, once b is done, releases c past its deadline
// when the script may have minted with its reply lost (End clears the
// indexes either way), or undoes the writes (queued with the records).
// A panic in that background part (a defect) is recovered and logged at
// ERROR; the contract is then left to its expiry and the indexes to
// End's or their own expiry, as when Redis does not take the release.
func (s *contracts) finishBeside(b besideCall, c *recipes.Contract, m mintCall, minted bool, scriptErr error) error {
	switch {
	case minted:
		if err := <-b; err != nil {
			s.releaseLater(c, 0)
			return err
		}
		return nil
	case scriptErr != nil && mayHaveRun(scriptErr):
		recovered.Go(s.c.log, "panic releasing a contract whose mint's reply was lost", func() {
			<-b
			s.releaseLater(c, s.c.cfg.ReadTimeout)
		}, zap.String("agent_id", c.OriginatingAgentID), zap.String("synthesis_id", c.SynthesisID))
	default:
		undo := s.unmint(c, m)
		recovered.Go(s.c.log, "panic queuing the undoing of a contract's indexes", func() {
			<-b
			_ = s.c.recs.add(queuedRecord{undo: undo})
		}, zap.String("agent_id", c.OriginatingAgentID), zap.String("synthesis_id", c.SynthesisID))
	}
	return nil
}

// mustInt is a decimal the code itself formatted.
func mustInt(v string) int64 {
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// releaseLater releases c, minted by a script whose other writes (its
// owner index, the global live index) failed, or that may have minted
// with its reply lost, so that its request, which answers 503, leaves
// no contract that is not found by id to run under: after wait (past
// the mint's deadline, when its script may still be on its way), in the
// background until Redis takes it, at most until c expires. End clears
// the global index's member whether it minted or not; when nothing was
// minted, the owner index is deleted too.
func (s *contracts) releaseLater(c *recipes.Contract, wait time.Duration) {
	s.c.background("releasing a contract whose mint failed", time.Until(c.ExpiresAt), wait, func(ctx context.Context) error {
		ended, err := s.End(ctx, c, recipes.StateReleased)
		if err != nil || ended {
			return err
		}
		// Nothing to end: when no contract was minted at all (State ""),
		// the owner index written beside its script goes too.
		st, err := s.State(ctx, c)
		if err != nil || st != "" {
			return err
		}
		start := time.Now()
		return s.c.done(store.OpContractUpdate, start, s.c.rdb.Del(ctx, s.ownerKey(c.SynthesisID)).Err())
	}, zap.String("agent_id", c.OriginatingAgentID), zap.String("synthesis_id", c.SynthesisID))
}

// queuedUndo is the undoing of besideMint's writes for a contract its
// script did not mint: the owner index and (Cluster mode) the global
// live index's member.
type queuedUndo struct {
	owner, global, member string
}

// unmint is the undoing of besideMint(c, m).
func (s *contracts) unmint(c *recipes.Contract, m mintCall) *queuedUndo {
	u := &queuedUndo{owner: s.ownerKey(c.SynthesisID)}
	if s.c.cluster {
		u.global, u.member = s.c.globalKey("cl"), m.member
	}
	return u
}

// write adds u's writes to p.
func (u *queuedUndo) write(ctx context.Context, p redis.Pipeliner) {
	p.Del(ctx, u.owner)
	if u.global != "" {
		p.ZRem(ctx, u.global, u.member)
	}
}

// pipeScript runs script and the commands extra adds in one round trip
// and returns the script's reply. Outside Cluster mode they go in one
// pipeline. In Cluster mode, where they are different nodes, the script
// (Script.Run: EVALSHA, then EVAL on NOSCRIPT) and the other commands
// (a pipeline) are sent concurrently as two calls: go-redis's Cluster
// pipeline, once one node fails, retries that node's commands after a
// backoff and, when the context ends first, sets that error on every
// command of the pipeline, so a script that ran would read as failed.
// A script Redis does not know (NOSCRIPT: restarted, failed over) is
// sent again as EVAL; the other commands ran already. The error is the
// script's, else the first other one, with the script's reply: a
// caller undoes what the script did when the other commands failed.
// A panic while sending the other commands (a defect: in extra, say)
// is recovered, logged at ERROR, and is their error
// (TestPanicBesideScript).
func (c *Client) pipeScript(ctx context.Context, script *redis.Script, keys []string, args []any, extra func(redis.Pipeliner)) (any, error) {
	if c.cluster {
		others := make(chan error, 1)
		go func() {
			var err error
			defer func() { others <- err }()
			defer recovered.IntoLog(&err, c.log, "panic sending the writes beside a script; they count as failed")
			_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				extra(p)
				return nil
			})
		}()
		v, err := script.Run(ctx, c.rdb, keys, args...).Result()
		oerr := <-others
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if oerr != nil && !errors.Is(oerr, redis.Nil) {
			return v, oerr
		}
		return v, nil
	}
	var sc *redis.Cmd
	cmds, _ := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		sc = script.EvalSha(ctx, p, keys, args...)
		extra(p)
		return nil
	})
	sent := sc
	if err := sc.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		sc = script.Eval(ctx, c.rdb, keys, args...)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for _, cmd := range cmds {
		if cmd == sent {
			continue
		}
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return sc.Val(), err
		}
	}
	return sc.Val(), nil
}
