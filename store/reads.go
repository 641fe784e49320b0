package store

// ReadPlan is how a lease, or an offer, reads the ready jobs a worker's scope may take. What
// it reads follows those jobs, not the jobs waiting beside them: read from the index of every
// ready job in dispatch order, a backlog that no lease takes (a queue nobody serves, a type no
// worker handles, a type whose breaker is open) would be passed over by every lease. Each
// store has an index of ready jobs by type and one by queue and type, each in dispatch order,
// and merges the reads it makes of them in dispatch order.
type ReadPlan int

const (
	// ReadOpen: every ready job through the index of them all, for a scope of no type or of
	// too many.
	ReadOpen ReadPlan = iota
	// ReadByQueueAndType: each of the types in each of the queues, through the index of ready
	// jobs by queue and type.
	ReadByQueueAndType
	// ReadByType: each of the types through the index of ready jobs by type, for a scope of
	// every queue or of more queues than that is worth (its queues then a condition).
	ReadByType
)

// PlanReads says how to read the ready jobs of queues (none: every queue) and types.
func PlanReads(queues, types []string) ReadPlan {
	switch {
	case len(types) == 0 || len(types) > MaxReads:
		return ReadOpen
	case len(queues) > 0 && len(queues)*len(types) <= MaxReads:
		return ReadByQueueAndType
	default:
		return ReadByType
	}
}

// MaxReads is how many reads, of a type or of a type in a queue, a lease makes at most
// (PlanReads): past that, one read of every ready job, whose statement does not grow with
// them. Where no backlog waits each read costs a few microseconds (on SQLite,
// BenchmarkJobLeaseTypes: a lease's transaction with 32 reads 1.2-1.4x one with a read of
// jobs_open), and where one waits it saves reading the backlog.
const MaxReads = 32

// NarrowsTypes reports whether a lease of types first narrows them to the ones with a ready job
// (each store's readyTypes), one probe of its index of ready jobs by type each, and then plans
// its reads for those: past MaxReads types. A worker of many handlers thus reads each of its
// types that has jobs waiting through that index, and passes over no backlog of a type it does
// not handle, as long as at most MaxReads of them have jobs waiting. Read through the index of
// every ready job, beside 100,000 jobs of another type on SQLite, workers of 40 types drained
// at a quarter of the rate they reach reading their types, and each job waited about 50 ms to
// start at 1,000 jobs a second. Where nothing waits the probes cost less than that read, which
// names every type (BenchmarkJobLeaseTypes in store/sqlite).
func NarrowsTypes(types []string) bool { return len(types) > MaxReads }

// MaxNamedQueues is how many queues a lease of every queue but some (the paused ones, those
// left out) names at most, so as to read each (both stores' readyQueuesBut): past that, it
// reads every queue and passes over the ones it leaves out.
const MaxNamedQueues = 16

// PausedBacklogMin is how many ready jobs the paused queues hold at least before a broker
// takes them for a backlog (JobLeaseParams.PausedBacklog): a lease of every queue then names
// the others, and no job is offered. Below it an offer reads past them
// (JobInsertOfferedAtCommit) rather than leave its job to a dispatch round, and a lease reads
// past them rather than find the queues to name first: beside 99 paused jobs on PostgreSQL, a
// drain as fast as with the queues named, enqueue to start p50 0.9x with offers.
const PausedBacklogMin = 100
