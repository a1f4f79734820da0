package engine

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"

	"github.com/caddy-rcns/caddy-rcns/policy/records"
)

// lockFile is the file in a records_dir whose exclusive lock (flock(2),
// LockFileEx on Windows) the gateway writing there holds; it is never
// written, nor removed. ownerFile, next to it, tells the holder's pid
// and name: the lock file itself is not written because on Windows the
// lock also bars reading and writing its first byte through any other
// handle, and where locks are fcntl(2) locks (AIX, Solaris) closing any
// descriptor of the file would drop them.
const (
	lockFile  = "gateway.lock"
	ownerFile = "gateway.lock.owner"
)

// lockOwner is what ownerFile holds. Process tells this process from
// another with the same pid (containers sharing a volume all run Caddy
// as pid 1).
type lockOwner struct {
	PID     int    `json:"pid"`
	Host    string `json:"host,omitempty"`
	Process string `json:"process"`
	Name    string `json:"name"`
	Since   string `json:"since"`
}

// processID identifies this process in owner files.
var processID = func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// heldError is what opening a records_dir fails with when another
// gateway (or another rcns handler of this process) holds it.
type heldError struct {
	dir    string
	holder string // "pid 1234 on host h, rcns handler name \"x\", since …", "name \"x\"" (self) or "" (unknown)
	self   bool   // the holder is this process
}

func (e *heldError) Error() string {
	who := "another gateway"
	switch {
	case e.self:
		who = "another rcns handler of this Caddy process (" + e.holder + ")"
	case e.holder != "":
		who += " (" + e.holder + ")"
	}
	return fmt.Sprintf("records_dir %s is held by %s: each gateway needs its own records_dir (give it a distinct name, or its own records_dir); "+
		"two gateways writing one directory break its negotiation record hash chains, so this one writes nothing there", e.dir, who)
}

// lockDirLocked takes the exclusive, non-blocking lock on dir and
// writes the owner file; rs.mu is held. When the lock is taken it fails
// with a *heldError naming the holder, having written nothing. The lock
// belongs to the open file, so a second recordState of this process
// (another handler name) conflicts as another process does, and the
// same recordState reopening dir (fsync changed) first releases it in
// closeLocked.
func (rs *recordState) lockDirLocked(dir string) error {
	rs.lockMu.Lock()
	defer rs.lockMu.Unlock()
	return rs.takeDirLock(dir)
}

// takeDirLock is lockDirLocked with rs.lockMu held (rs.mu need not be:
// checkLock).
func (rs *recordState) takeDirLock(dir string) error {
	l := flock.New(filepath.Join(dir, lockFile), flock.SetPermissions(0o640))
	ok, err := l.TryLock()
	if err != nil {
		return fmt.Errorf("records_dir: locking %s: %v", l.Path(), err)
	}
	if !ok {
		e := &heldError{dir: dir}
		var o lockOwner
		// Best effort: the holder may not have written it yet.
		if raw, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil && json.Unmarshal(raw, &o) == nil && o.PID != 0 {
			e.self = o.Process == processID
			switch {
			case e.self:
				e.holder = fmt.Sprintf("name %q", o.Name)
			case o.Host != "":
				e.holder = fmt.Sprintf("pid %d on host %s, rcns handler name %q, since %s", o.PID, o.Host, o.Name, o.Since)
			default:
				e.holder = fmt.Sprintf("pid %d, rcns handler name %q, since %s", o.PID, o.Name, o.Since)
			}
		}
		return e
	}
	rs.lock = l
	host, _ := os.Hostname()
	raw, _ := json.Marshal(lockOwner{PID: os.Getpid(), Host: host, Process: processID, Name: rs.name, Since: time.Now().UTC().Format(time.RFC3339)})
	_ = records.WriteFileAtomic(filepath.Join(dir, ownerFile), raw) // best effort: it only names the holder
	return nil
}

// unlockDirLocked removes the owner file and releases the lock, if
// held; rs.mu is held. The owner file goes first: once unlocked, the
// next holder writes its own.
func (rs *recordState) unlockDirLocked() {
	rs.lockMu.Lock()
	defer rs.lockMu.Unlock()
	if rs.lock == nil {
		return
	}
	owner := filepath.Join(filepath.Dir(rs.lock.Path()), ownerFile)
	var o lockOwner
	if raw, err := os.ReadFile(owner); err == nil && json.Unmarshal(raw, &o) == nil && o.Process == processID && o.Name == rs.name {
		_ = os.Remove(owner) // ours: not another's that took a lock file removed under this one (checkLock)
	}
	_ = rs.lock.Close()
	rs.lock = nil
}

// checkLock keeps the records_dir lock effective: gateway.lock removed
// or replaced under the gateway (by hand) leaves the lock held on a file
// no other gateway opens, so a second one could take the directory
// (helper-140). The flusher calls it each second: when the path no
// longer names the file locked, the lock is taken again at the path
// (a WARN), or, when another gateway took it meanwhile, an ERROR names
// that gateway, once until it is resolved: both then write the
// directory, and its hash chains break, until one stops. A lock that
// cannot be taken for another reason (the directory gone, a directory
// at the lock's path) is a WARN, once, and tried again each second.
// It takes rs.lockMu, never rs.mu: open and close hold rs.mu while they
// wait for the flusher to stop (helper-143: a reload that met a check
// hung the gateway, every request after it waiting on rs.mu).
func (rs *recordState) checkLock(logger *zap.Logger) {
	rs.lockMu.Lock()
	defer rs.lockMu.Unlock()
	if rs.lock == nil || logger == nil {
		return
	}
	held, err := rs.lock.Stat()
	if err != nil {
		return
	}
	if at, err := os.Stat(rs.lock.Path()); err == nil && os.SameFile(held, at) {
		rs.lockLost = false
		return
	}
	dir := filepath.Dir(rs.lock.Path())
	old := rs.lock
	rs.lock = nil
	if err := rs.takeDirLock(dir); err != nil {
		rs.lock = old // still ours: released at close
		if rs.lockLost {
			return
		}
		rs.lockLost = true
		var held *heldError
		if errors.As(err, &held) {
			logger.Error("gateway.lock was removed or replaced under the gateway, and another gateway has locked records_dir since: both write it, and its hash chains break, until one stops",
				zap.String("records_dir", dir), zap.Error(err))
			return
		}
		// Not another gateway: the directory gone, a directory put at
		// the lock's path. Tried again each second.
		logger.Warn("gateway.lock was removed or replaced under the gateway and cannot be locked again yet: until it is, another gateway could take records_dir",
			zap.String("records_dir", dir), zap.Error(err))
		return
	}
	_ = old.Close()
	rs.lockLost = false
	logger.Warn("gateway.lock was removed or replaced under the gateway: it is locked again, so no other gateway takes records_dir",
		zap.String("records_dir", dir))
}
