package broker

import (
	"context"
	"os"
	"time"

	"github.com/jobwire/jobwire/store"
)

// brokerLister is what a cluster's store offers to list the brokers serving its database.
type brokerLister interface {
	Brokers(ctx context.Context) ([]store.BrokerRecord, error)
}

// Brokers lists the brokers that serve this broker's database, oldest first, and says which
// one this broker is (self). A broker alone (no Cluster, or one that cannot list its members)
// lists itself, the leader, with no id: it is the database's only broker.
func (b *Broker) Brokers(ctx context.Context) (list []store.BrokerRecord, self string, err error) {
	return b.mode.brokers(ctx)
}

// loneRecord describes a broker that is alone on its database.
func loneRecord(addr string, started time.Time) store.BrokerRecord {
	host, _ := os.Hostname()
	return store.BrokerRecord{Addr: addr, PID: os.Getpid(), Host: host, StartedAt: started, Leader: true, Alive: true}
}
