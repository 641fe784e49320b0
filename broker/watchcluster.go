package broker

import (
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/store"
)

// Watches across brokers. A broker whose watch follows jobs tells the other brokers of the
// cluster which (EventWatch); each keeps them for remoteWatchFor as watched elsewhere, and a
// write of its own to such a job publishes EventJob with its id, which wakes the watching
// broker's watches as its own writes would. The successes of watched jobs are then written one
// by one, not with the batch's others (resultOp.Success): a job no one watches costs nothing
// more. The waiting jobs a parent's failure cancels, and those a requeue revives, are changed
// by the store, which alone knows them: it publishes EventJob with their ids whoever watches
// them (store.DependentsChangedNotifier), and only when there are some. A notice lost (a
// listening connection that broke, a watch announced while the job was being finished) is
// caught by the backstop read.

const (
	// EventWatch announces jobs a broker watches; Key is their ids, comma-separated.
	EventWatch store.EventKind = "watch"
	// EventJob says watched jobs changed; Key is their ids, comma-separated (store.EventJob).
	EventJob = store.EventJob
	// remoteWatchFor is how long a job announced as watched elsewhere is treated so. A watch
	// that lasts longer relies on the backstop alone.
	remoteWatchFor = time.Hour
	// announceChunk is how many ids one EventWatch carries: a notification holds under 8 KB.
	announceChunk = 500
)

// clustered reports whether other brokers may watch this broker's jobs.
func (b *Broker) clustered() bool { return b.mode.id() != "" }

// announce tells the other brokers of a cluster that ids are watched here.
func (h *watchHub) announce(b *Broker, ids []int64) {
	if !b.clustered() {
		return
	}
	var keys []string
	for start := 0; start < len(ids); start += announceChunk {
		part := ids[start:min(start+announceChunk, len(ids))]
		var s strings.Builder
		for i, id := range part {
			if i > 0 {
				s.WriteByte(',')
			}
			s.WriteString(strconv.FormatInt(id, 10))
		}
		keys = append(keys, s.String())
	}
	err := b.do(b.ctx, "watch", func(tx store.Tx) error {
		for _, k := range keys {
			tx.Publish(store.Event{Kind: EventWatch, Key: k})
		}
		return nil
	})
	if err != nil {
		b.log.Debug("could not announce watched jobs; the backstop covers them", "err", err)
	}
}

// onClusterEvent handles the watch events of the cluster (Broker.WatchCluster).
func (h *watchHub) onClusterEvent(b *Broker, e store.Event) {
	switch e.Kind {
	case EventWatch:
		if e.From == b.mode.id() {
			return
		}
		until := b.now().Add(remoteWatchFor)
		h.mu.Lock()
		for _, id := range store.JobEventIDsOf(e.Key) {
			h.remote[id] = until
		}
		h.mu.Unlock()
	case EventJob:
		// Nothing watched here: one atomic load, the key left unread.
		if h.watched.Load() > 0 && e.From != b.mode.id() {
			h.changed(changeAny, store.JobEventIDsOf(e.Key)...)
		}
	case store.EventResync:
		h.resync()
	}
}

// resync tells every watch that its jobs may have changed: notices may have been lost.
func (h *watchHub) resync() {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.byJob))
	for id := range h.byJob {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	h.changed(changeAny, ids...)
}

// watchedElsewhere reports whether another broker announced a watch of the job lately.
func (b *Broker) watchedElsewhere(id int64) bool {
	if !b.clustered() {
		return false
	}
	h := b.svc.watches
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.remote[id]
	if ok && b.now().After(until) {
		delete(h.remote, id)
		return false
	}
	return ok
}

// publishChanged publishes, in tx, that the job changed, if another broker watches it.
func (b *Broker) publishChanged(tx store.Tx, id int64) {
	if b.clustered() && b.watchedElsewhere(id) {
		tx.Publish(store.Event{Kind: EventJob, Key: strconv.FormatInt(id, 10)})
	}
}

// startWatchEvents has the hub hear the cluster's events; alone, there are none.
func (h *watchHub) startWatchEvents(b *Broker) {
	b.WatchCluster(func(e store.Event) { h.onClusterEvent(b, e) })
}

// WatchedElsewhere reports whether another broker announced a watch of the job (for tests).
func (b *Broker) WatchedElsewhere(id int64) bool { return b.watchedElsewhere(id) }

// ForgetWatchedElsewhere forgets every watch other brokers announced, as a broker that missed
// their notices would (for tests of the backstop).
func (b *Broker) ForgetWatchedElsewhere() {
	h := b.svc.watches
	h.mu.Lock()
	clear(h.remote)
	h.mu.Unlock()
}
