package server

import (
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// progressFromProto reads a worker's Progress; the broker checks its rules (job.CheckProgress).
func progressFromProto(p *jobwirev1.Progress) job.Progress {
	return job.Progress{Fraction: p.GetFraction(), HasFraction: p.Fraction != nil, Message: p.GetMessage()}
}

// progressToProto is a job's progress on the wire; nil when it has none.
func progressToProto(p *job.Progress) *jobwirev1.JobProgress {
	if p == nil {
		return nil
	}
	out := &jobwirev1.JobProgress{Attempt: int32(p.Attempt), Message: p.Message, UpdatedAt: ts(p.UpdatedAt)}
	if p.HasFraction {
		out.Fraction = &p.Fraction
	}
	return out
}
