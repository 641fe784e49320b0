#!/usr/bin/env bash
# Runs Asynq and Jobwire side by side, in interleaved rounds, so that both meet the machine in
# the same state:  scripts/vs-asynq.sh [ROUNDS]
#
# Asynq runs on a private redis-server (Debian's redis-server package) on a free loopback port,
# with its append-only file synced every second, as Asynq's users run it, and its server checks
# for new tasks every millisecond once its queues are empty (TaskCheckInterval; Asynq's default,
# a second, holds a job enqueued into an idle server for half a second); Jobwire on a fresh
# SQLite file (durability normal) through jobwire-bench. Each round: one producer enqueueing
# 5,000 jobs one call at a time while workers run them (bench/asynq: a server of 512 workers;
# jobwire-bench e2e-1 --producers 1: two worker processes of 256 slots), then enqueue-to-start at
# 1,000 and 200 jobs a second, Asynq first in odd rounds and Jobwire first in even ones. One line
# per round.
set -euo pipefail
rounds=${1:-5}
source "$(dirname "$0")/peers.sh"
need_redis
dir=$(mktemp -d)
trap 'stop_peers "$dir"' EXIT
start_redis "$dir"
(cd "$root/bench/asynq" && go build -o "$dir/asynq" .)
(cd "$root" && go build -o "$dir/jobwire" ./cmd/jobwire && go build -o "$dir/jobwire-bench" ./cmd/jobwire-bench)
asynq=("$dir/asynq" -redis "$REDIS_ADDR" -check-interval 1ms)
jobwire=("$dir/jobwire-bench" --broker-bin "$dir/jobwire")
asynq_e2e() { "${asynq[@]}" -scenario e2e-1 -jobs 5000 | awk '{print $6}'; }
jobwire_e2e() {
  "${jobwire[@]}" --scenarios e2e-1 --producers 1 --e2e-jobs 5000 2>&1 | awk '/^e2e-1 / {print $4}'
}
asynq_lat() { "${asynq[@]}" -scenario latency -rate "$1" -duration 5s | awk '{print $7 "/" $10}'; }
jobwire_lat() {
  "${jobwire[@]}" --scenarios latency --rate "$1" --latency-duration 5s 2>&1 | awk '/^latency / {print $5 "/" $6}'
}
for i in $(seq 1 "$rounds"); do
  if ((i % 2)); then
    ae=$(asynq_e2e); je=$(jobwire_e2e)
  else
    je=$(jobwire_e2e); ae=$(asynq_e2e)
  fi
  line="round $i | one producer, jobs/s: asynq $ae jobwire $je"
  for rate in 1000 200; do
    if ((i % 2)); then
      al=$(asynq_lat "$rate"); jl=$(jobwire_lat "$rate")
    else
      jl=$(jobwire_lat "$rate"); al=$(asynq_lat "$rate")
    fi
    line="$line | p50/p99 ms at $rate/s asynq $al jobwire $jl"
  done
  echo "$line | load $(cut -d' ' -f1 /proc/loadavg)"
done
