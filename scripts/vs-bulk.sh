#!/usr/bin/env bash
# Runs the bulk scenarios of Jobwire, Asynq and Faktory side by side, in interleaved rounds, so
# that all three meet the machine in the same state:  scripts/vs-bulk.sh [ROUNDS] [JOBS]
#
# Each round, each system in turn (the one that goes first rotates): a drain of JOBS jobs (20,000
# by default) queued before the workers start; JOBS jobs enqueued 100 a call by 4 producers
# while workers run them (Asynq has no call that enqueues many); and JOBS jobs enqueued one a
# call by 64 producers at once while workers run them. Jobwire through jobwire-bench on a fresh
# SQLite file (durability normal, two worker processes of 256 slots), Asynq through bench/asynq
# (Redis with its append-only file synced every second, a server of 512 workers), Faktory
# through bench/faktory (as shipped, faktory_worker_go with its default 20 fetchers; its drain
# is timed from its first job's start, see bench/faktory). One line per round, jobs/s.
set -euo pipefail
rounds=${1:-5}
jobs=${2:-20000}
source "$(dirname "$0")/peers.sh"
need_redis
dir=$(mktemp -d)
trap 'stop_peers "$dir"' EXIT
start_redis "$dir"
start_faktory "$dir"
(cd "$root/bench/asynq" && go build -o "$dir/asynq" .)
(cd "$root/bench/faktory" && go build -o "$dir/faktory" .)
(cd "$root" && go build -o "$dir/jobwire" ./cmd/jobwire && go build -o "$dir/jobwire-bench" ./cmd/jobwire-bench)

# Each prints "drain e2e-100 e2e-64" in jobs/s, "-" where the system has no such scenario.
run_jobwire() {
  "$dir/jobwire-bench" --broker-bin "$dir/jobwire" --scenarios drain,e2e-100,e2e-1 --producers 64 \
    --jobs "$jobs" --e2e-jobs "$jobs" 2>&1 |
    awk '$1 == "drain" {d = $4} $1 == "e2e-100" {b = $4} $1 == "e2e-1" {p = $4} END {print d, b, p}'
}
run_asynq() {
  local a=("$dir/asynq" -redis "$REDIS_ADDR" -check-interval 1ms -jobs "$jobs")
  echo "$("${a[@]}" -scenario drain | awk '{print $6}') - $("${a[@]}" -scenario e2e-1 -producers 64 | awk '{print $6}')"
}
run_faktory() {
  local f=("$dir/faktory" -jobs "$jobs")
  echo "$("${f[@]}" -scenario drain | awk '{print $6}') $("${f[@]}" -scenario e2e-100 | awk '{print $6}')" \
    "$("${f[@]}" -scenario e2e-1 -producers 64 | awk '{print $6}')"
}
systems=(jobwire asynq faktory)
for i in $(seq 1 "$rounds"); do
  declare -A got=()
  for k in 0 1 2; do
    s=${systems[$(((i - 1 + k) % 3))]}
    got[$s]=$("run_$s")
  done
  read -r jd jb jp <<<"${got[jobwire]}"
  read -r ad _ ap <<<"${got[asynq]}"
  read -r fd fb fp <<<"${got[faktory]}"
  echo "round $i | drain: jobwire $jd asynq $ad faktory $fd | batches of 100: jobwire $jb faktory $fb" \
    "| 64 producers: jobwire $jp asynq $ap faktory $fp | load $(cut -d' ' -f1 /proc/loadavg)"
done
