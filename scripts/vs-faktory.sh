#!/usr/bin/env bash
# Runs Faktory and Jobwire side by side, in interleaved rounds, so that both meet the machine in
# the same state:  scripts/vs-faktory.sh [ROUNDS]
#
# Faktory 1.9.3 (built from the Go module proxy by bench/faktory's go.mod) runs as shipped: its
# own Redis (Debian's redis-server package) on a Unix socket, with Faktory's persistence
# settings, on free loopback ports and a private directory; its worker is faktory_worker_go with
# its default 20 fetchers. Jobwire runs on a fresh SQLite file (durability normal) through
# jobwire-bench. Each round: one producer pushing 5,000 jobs one call at a time while workers run
# them (jobwire-bench e2e-1 --producers 1: two worker processes of 256 slots), then
# enqueue-to-start at 1,000 and 200 jobs a second, Faktory first in odd rounds and Jobwire first
# in even ones. One line per round.
set -euo pipefail
rounds=${1:-5}
source "$(dirname "$0")/peers.sh"
need_redis
dir=$(mktemp -d)
trap 'stop_peers "$dir"' EXIT
start_faktory "$dir"
(cd "$root/bench/faktory" && go build -o "$dir/faktory" .)
(cd "$root" && go build -o "$dir/jobwire" ./cmd/jobwire && go build -o "$dir/jobwire-bench" ./cmd/jobwire-bench)
jobwire=("$dir/jobwire-bench" --broker-bin "$dir/jobwire")
faktory_e2e() { "$dir/faktory" -scenario e2e-1 -jobs 5000 | awk '{print $6}'; }
jobwire_e2e() {
  "${jobwire[@]}" --scenarios e2e-1 --producers 1 --e2e-jobs 5000 2>&1 | awk '/^e2e-1 / {print $4}'
}
faktory_lat() { "$dir/faktory" -scenario latency -rate "$1" -duration 5s | awk '{print $7 "/" $10}'; }
jobwire_lat() {
  "${jobwire[@]}" --scenarios latency --rate "$1" --latency-duration 5s 2>&1 | awk '/^latency / {print $5 "/" $6}'
}
for i in $(seq 1 "$rounds"); do
  if ((i % 2)); then
    fe=$(faktory_e2e); je=$(jobwire_e2e)
  else
    je=$(jobwire_e2e); fe=$(faktory_e2e)
  fi
  line="round $i | one producer, jobs/s: faktory $fe jobwire $je"
  for rate in 1000 200; do
    if ((i % 2)); then
      fl=$(faktory_lat "$rate"); jl=$(jobwire_lat "$rate")
    else
      jl=$(jobwire_lat "$rate"); fl=$(faktory_lat "$rate")
    fi
    line="$line | p50/p99 ms at $rate/s faktory $fl jobwire $jl"
  done
  echo "$line | load $(cut -d' ' -f1 /proc/loadavg)"
done
