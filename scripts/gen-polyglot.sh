#!/usr/bin/env bash
# Regenerates the Python stubs of the jobwire.v1 API into sdks/python/jobwire/v1/.
#
# The stubs land inside the SDK's own `jobwire` package, so the generated imports
# (`from jobwire.v1 import job_pb2`) resolve without rewriting. They are generated with
# Debian's protoc 3.21 and grpc_python_plugin: the oldest generator of the runtimes the package
# accepts (pyproject.toml), so that the stubs load on Debian's python3-protobuf 3.21 and
# python3-grpcio 1.51 as well as on the newer PyPI releases constraints.txt pins (tests/test_stubs.py
# imports them with warnings as errors). Stubs from a newer grpcio-tools would refuse older
# runtimes: they check the runtime's version on import.
#
# The Node.js SDK loads proto/ at run time with @grpc/proto-loader and needs no generation.
#
# Usage: scripts/gen-polyglot.sh [--check]   (--check fails when the committed stubs are stale)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/sdks/python"
pkg="$out/jobwire/v1"

plugin="$(command -v grpc_python_plugin || true)"
if [[ -z "$plugin" ]] || ! command -v protoc >/dev/null; then
  echo "gen-polyglot: needs protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2
  exit 1
fi

gen_into() {
  local dest="$1"
  rm -rf "$dest/jobwire/v1"
  mkdir -p "$dest/jobwire/v1"
  (cd "$root/proto" && protoc -I . \
    --python_out="$dest" \
    --grpc_python_out="$dest" \
    --plugin=protoc-gen-grpc_python="$plugin" \
    jobwire/v1/*.proto)
  cat >"$dest/jobwire/v1/__init__.py" <<'PY'
"""Generated protobuf and gRPC stubs of the jobwire.v1 API. Do not edit: run scripts/gen-polyglot.sh."""
PY
}

if [[ "${1:-}" == "--check" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  gen_into "$tmp"
  if ! diff -r "$tmp/jobwire/v1" "$pkg" -x __pycache__; then
    echo "gen-polyglot: sdks/python/jobwire/v1 is stale: run scripts/gen-polyglot.sh and commit the result" >&2
    exit 1
  fi
  exit 0
fi

gen_into "$out"
