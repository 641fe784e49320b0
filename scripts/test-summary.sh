#!/usr/bin/env bash
# Prints the closing summary of `make test` from the logs its steps left in the folder $1. It
# runs only after every step passed; a failing step has already stopped make with its output.
set -euo pipefail
dir=${1:?usage: test-summary.sh LOG_DIR}

count() { grep -cE "$1" "$2" || true; }
go_ok=$(count $'^ok +\t' "$dir/go-test.log")
go_none=$(count $'^\\? +\t' "$dir/go-test.log")
read -ra langs <<<"$(sed -nE 's/^scenario +//p' "$dir/conformance.txt")"
read -ra passed <<<"$(sed -nE 's/^passed +//p' "$dir/conformance.txt")"
conformance=()
conformance_passed=0
for i in "${!langs[@]}"; do
  conformance+=("${langs[$i]} ${passed[$i]:-?}")
  conformance_passed=$((conformance_passed + ${passed[$i]%%/*}))
done
python=$(sed -nE 's/^Ran ([0-9]+) tests? .*/\1/p' "$dir/python-test.log")
python_debian=$(sed -nE 's/^Ran ([0-9]+) tests? .*/\1/p' "$dir/python-debian-test.log")
node_pass=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$dir/node-test.tap")
node_skip=$(sed -nE 's/^# skipped ([0-9]+)$/\1/p' "$dir/node-test.tap")
java=$(sed -nE 's/^Tests run: ([0-9]+),.*/\1/p' "$dir/java-test.txt" | awk '{n += $1} END {print n}')
rust=$(sed -nE 's/^test result: ok\. ([0-9]+) passed.*/\1/p' "$dir/rust-test.log" | awk '{n += $1} END {print n}')

echo
echo "make test passed"
printf '  %-12s %s packages passed with -race (%s without tests)\n' "go" "$go_ok" "$go_none"
printf '  %-12s scenarios passed: %s\n' "conformance" "$(IFS=,; echo "${conformance[*]}" | sed 's/,/, /g')"
printf "  %-12s %s tests passed on PyPI's grpcio and protobuf, %s on Debian's\n" "python SDK" "${python:-?}" "${python_debian:-?}"
printf '  %-12s %s tests passed, %s skipped\n' "node SDK" "${node_pass:-?}" "${node_skip:-?}"
printf '  %-12s %s tests passed\n' "java SDK" "${java:-?}"
printf '  %-12s %s tests passed\n' "rust SDK" "${rust:-?}"
# One plain closing line, for tools that read a run's last line.
echo "  (Go packages, conformance runs and SDK tests together:)"
echo "total: $((go_ok + conformance_passed + ${python:-0} + ${python_debian:-0} + ${node_pass:-0} + ${java:-0} + ${rust:-0})) passed, 0 failed"
