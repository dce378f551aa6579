#!/bin/bash
# Proxy CPU per Redis request through Tollgate, HAProxy and nginx (stream) in the same run,
# each in front of one local redis-server, driven by redis-benchmark; in a network namespace
# this script makes for itself (root, unshare, redis-server, redis-benchmark, haproxy, nginx):
#
#   bash benches/redis/per-request.sh [BINARY] [REQUESTS] [ROUNDS]
#
# BINARY defaults to target/release/tollgate, REQUESTS to 20000, ROUNDS to 3 (the peers
# interleaved, round by round). Two cases per peer: `new` opens a new connection per request
# (`redis-benchmark -k 0 -c 10 -t ping_inline`), `kept` sends them over 50 kept connections
# (`-k 1 -c 50`). The peer's CPU is read from /proc/PID/task/*/schedstat (every process of
# the peer) before and after, and split into user and system time in the proportion of the
# `utime` and `stime` ticks of /proc/PID/stat over the same run (10 ms ticks: about 170 per
# peer for 20000 new connections, 30 for kept ones; as the load tool does, benches/support/
# cpu.rs); one worker thread each (`[proxy] threads = 1`, HAProxy `nbthread
# 1`, nginx `worker_processes 1`). Tollgate runs with one rule far above the load (so every
# request is decided and counted, none refused); the others with none.
set -euo pipefail
BIN=$(realpath "${1:-target/release/tollgate}")
REQUESTS=${2:-20000}
ROUNDS=${3:-3}
. "$(dirname "$(realpath "$0")")/../support/harness.sh"
in_own_netns "$BIN" "$REQUESTS" "$ROUNDS"
needs redis-server redis-benchmark haproxy nginx python3
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$DIR"' EXIT
REDIS=16379
FRONT=18080
redis-server --port "$REDIS" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  > "$DIR/redis.log" 2>&1 &
for _ in $(seq 100); do redis-cli -p "$REDIS" ping > /dev/null 2>&1 && break; sleep 0.05; done

tollgate_config "enabled = false" "$FRONT" "$REDIS" 10000000/1s > "$DIR/tollgate.toml"
haproxy_head 10s > "$DIR/haproxy.cfg"
cat >> "$DIR/haproxy.cfg" <<CFG
frontend front
  bind 127.0.0.1:$FRONT
  default_backend redis
backend redis
  server s 127.0.0.1:$REDIS
CFG
MODULE=/usr/lib/nginx/modules/ngx_stream_module.so
cat > "$DIR/nginx.conf" <<CFG
$( [ -e "$MODULE" ] && echo "load_module $MODULE;" )
worker_processes 1;
daemon off;
pid $DIR/nginx.pid;
error_log $DIR/nginx-error.log warn;
events { worker_connections 4096; }
stream {
  server {
    listen 127.0.0.1:$FRONT;
    proxy_pass 127.0.0.1:$REDIS;
  }
}
CFG

# Starts peer $1; sets PIDS (its processes).
start() {
  case "$1" in
    tollgate) RUST_LOG=warn "$BIN" run --config "$DIR/tollgate.toml" 2> "$DIR/tollgate.log" & ;;
    haproxy) haproxy -f "$DIR/haproxy.cfg" -db 2> "$DIR/haproxy.log" & ;;
    nginx) nginx -c "$DIR/nginx.conf" -e "$DIR/nginx-error.log" 2> "$DIR/nginx.log" & ;;
  esac
  LEAD=$!
  for _ in $(seq 200); do redis-cli -p "$FRONT" ping > /dev/null 2>&1 && break; sleep 0.05; done
  redis-cli -p "$FRONT" ping | grep -q PONG || { echo "$1 did not come up" >&2; exit 1; }
  PIDS="$LEAD $( { pgrep -P "$LEAD" || true; } | tr "\n" " ")"
}

printf '%-6s %-9s %-5s %12s %14s %10s %10s %7s\n' round peer case "requests/s" "CPU us/request" \
  "user us" "system us" ticks
for round in $(seq "$ROUNDS"); do
  for peer in tollgate haproxy nginx; do
    start "$peer"
    for case in new kept; do
      if [ "$case" = new ]; then flags=(-k 0 -c 10); else flags=(-k 1 -c 50); fi
      before=$(cpu_modes $PIDS)
      t0=$(date +%s.%N)
      redis-benchmark -p "$FRONT" "${flags[@]}" -n "$REQUESTS" -t ping_inline -q > "$DIR/bench.out" 2>&1
      t1=$(date +%s.%N)
      after=$(cpu_modes $PIDS)
      PYTHONPATH="$SUPPORT" python3 - "$round" "$peer" "$case" "$REQUESTS" "$before" "$after" \
        "$t0" "$t1" <<'EOF'
import sys
from schedstat import split
r, peer, case, n, before, after, t0, t1 = sys.argv[1:]
n = int(n)
c0, *m0 = before.split()
c1, *m1 = after.split()
m0, m1 = [int(t) for t in m0], [int(t) for t in m1]
cpu = float(c1) - float(c0)
modes = split(cpu, m0, m1)
user, system = (f"{t / n * 1e6:10.2f}" for t in modes) if modes else ("-", "-")
ticks = sum(m1) - sum(m0)
print(f"{r:<6} {peer:<9} {case:<5} {n / (float(t1) - float(t0)):12.0f} {cpu / n * 1e6:14.2f} "
      f"{user:>10} {system:>10} {ticks:7}")
EOF
    done
    kill -TERM "$LEAD"
    wait "$LEAD" 2> /dev/null || true
  done
done
