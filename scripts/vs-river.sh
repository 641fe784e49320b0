#!/usr/bin/env bash
# Runs River and Jobwire side by side on one PostgreSQL database, in interleaved rounds, so that
# both meet the machine in the same state:  scripts/vs-river.sh [ROUNDS]
#
# Each round: River drain and e2e-100 (bench/river, 512 workers, fetch cooldown 1 ms, poll
# 50 ms), Jobwire drain and e2e-100 (jobwire-bench --quick, one broker, 2 workers x 256), one
# producer enqueueing 3,000 jobs one call at a time while the workers run them (e2e-1), then
# enqueue-to-start at 1,000 and 200 jobs/s, River then Jobwire (and the share of the run
# Jobwire's writer was busy, its WRITER % column). One line per round. The database
# is JOBWIRE_TEST_POSTGRES; run it under scripts/with-postgres.sh --durable for a private one.
set -euo pipefail
rounds=${1:-5}
: "${JOBWIRE_TEST_POSTGRES:?set it, or run under scripts/with-postgres.sh --durable}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root/bench/river" && go build -o "$dir/river" .)
(cd "$root" && go build -o "$dir/jobwire" ./cmd/jobwire && go build -o "$dir/jobwire-bench" ./cmd/jobwire-bench)
river=("$dir/river" -db "$JOBWIRE_TEST_POSTGRES" -workers 512 -fetch-cooldown 1ms -fetch-poll 50ms)
jobwire=("$dir/jobwire-bench" --quick --broker-bin "$dir/jobwire" --db "$JOBWIRE_TEST_POSTGRES")
field() { awk -v f="$1" '{print $f}'; }
for i in $(seq 1 "$rounds"); do
  rd=$("${river[@]}" -scenario drain | field 6)
  re=$("${river[@]}" -scenario e2e-100 | field 6)
  read -r jd je < <("${jobwire[@]}" --jobs 20000 --e2e-jobs 20000 --scenarios drain,e2e-100 2>&1 |
    awk '/^(drain|e2e-100) / {printf "%s ", $4} END {print ""}')
  r1=$("${river[@]}" -scenario e2e-1 -jobs 3000 | field 6)
  j1=$("${jobwire[@]}" --scenarios e2e-1 --producers 1 --e2e-jobs 3000 2>&1 | awk '/^e2e-1 / {print $4}')
  line="round $i | drain river $rd jobwire $jd | e2e-100 river $re jobwire $je | one producer river $r1 jobwire $j1"
  for rate in 1000 200; do
    rl=$("${river[@]}" -scenario latency -rate "$rate" -duration 5s | awk '{print $7 "/" $10}')
    jl=$("${jobwire[@]}" --scenarios latency --rate "$rate" --latency-duration 5s 2>&1 |
      awk '/^latency / {print $5 "/" $6 " (writer " $10 "%)"}')
    line="$line | p50/p99 ms at $rate/s river $rl jobwire $jl"
  done
  echo "$line | load $(cut -d' ' -f1 /proc/loadavg)"
done
