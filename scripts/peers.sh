# Sourced by the scripts that run a peer beside Jobwire (vs-asynq.sh, vs-faktory.sh,
# vs-bulk.sh): each starts the peers' servers it needs in a private directory on free loopback
# ports, and stops them on exit.

# free_port prints a free loopback TCP port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# need_redis stops the script unless Debian's redis-server is installed.
need_redis() {
  command -v redis-server >/dev/null || { echo "$(basename "$0"): needs redis-server (apt-get install redis-server)" >&2; exit 2; }
}

# start_redis DIR starts a redis-server for Asynq with its append-only file synced every
# second, as Asynq's users run it, and sets REDIS_ADDR.
start_redis() {
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --dir "$1" --appendonly yes --appendfsync everysec \
    --save '' --daemonize yes --pidfile "$1/redis.pid" --logfile "$1/redis.log"
  REDIS_ADDR="127.0.0.1:$port"
  STOP_PEERS+=("kill \"\$(cat '$1/redis.pid')\" 2>/dev/null; sleep 0.2")
}

# start_faktory DIR builds Faktory's server and runs it as shipped (its own redis-server on a
# Unix socket, Faktory's persistence settings), and exports FAKTORY_URL.
start_faktory() {
  local port
  (cd "$root/bench/faktory" && go build -o "$1/faktory-server" github.com/contribsys/faktory/cmd/faktory)
  mkdir -p "$1/faktory-db" "$1/faktory-conf"
  port=$(free_port)
  "$1/faktory-server" -b "127.0.0.1:$port" -w "127.0.0.1:$(free_port)" -d "$1/faktory-db" -c "$1/faktory-conf" \
    -l warn >"$1/faktory.log" 2>&1 &
  STOP_PEERS+=("kill $! 2>/dev/null; wait $! 2>/dev/null")
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  export FAKTORY_URL="tcp://127.0.0.1:$port"
}

# stop_peers stops what start_redis and start_faktory started and removes DIR.
stop_peers() {
  local s
  for s in "${STOP_PEERS[@]}"; do eval "$s"; done
  rm -rf "$1"
}

STOP_PEERS=()
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
