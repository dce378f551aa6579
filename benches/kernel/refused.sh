#!/bin/bash
# Proxy CPU per refused connection attempt from a source over its limit: Tollgate with
# [kernel] (the attempts die in the kernel), Tollgate without (refused at accept), and HAProxy
# (a stick table, `tcp-request connection reject`) in the same run, in a network namespace this
# script makes for itself (root, unshare, nft, python3, haproxy):
#
#   bash benches/kernel/refused.sh [BINARY] [ATTEMPTS] [ROUNDS]
#
# BINARY defaults to target/release/tollgate, ATTEMPTS to 20000, ROUNDS to 3 (the three peers
# interleaved, round by round). The source 127.0.0.2 goes over a 5/1m limit with 20 attempts;
# then ATTEMPTS more are timed, and the peer's CPU is read from /proc/PID/task/*/schedstat
# before and after (so its background work, the updater's ticks, is counted too). One worker
# thread each (`[proxy] threads = 1`, HAProxy `nbthread 1`). With [kernel] the attempts are
# refused by the kernel (action reset); the others accept and close or reset.
set -euo pipefail
BIN=$(realpath "${1:-target/release/tollgate}")
ATTEMPTS=${2:-20000}
ROUNDS=${3:-3}
. "$(dirname "$(realpath "$0")")/../support/harness.sh"
in_own_netns "$BIN" "$ATTEMPTS" "$ROUNDS"
needs haproxy nft python3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/flood.py" <<'EOF'
import socket, subprocess, sys, time
from schedstat import cpu_seconds
pid, mode, n, port, ready = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for _ in range(250):
    try:
        socket.create_connection(("127.0.0.1", ready), timeout=1).close()
        break
    except OSError:
        time.sleep(0.02)
def attempt():
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    try:
        s.connect(("127.0.0.1", port))
        s.recv(1)
    except OSError:
        pass
    finally:
        s.close()
for _ in range(20):
    attempt()
time.sleep(0.5)
if mode == "kernel":
    listed = subprocess.run(["nft", "list", "set", "inet", "tollgate", "v4_hosts"],
                            capture_output=True, text=True).stdout
    assert "127.0.0.2" in listed, listed
c0, t0 = cpu_seconds([pid]), time.time()
for _ in range(n):
    attempt()
c1, t1 = cpu_seconds([pid]), time.time()
print(f"{mode:>8}: {n} refused attempts in {t1 - t0:.2f} s, CPU {c1 - c0:.4f} s = "
      f"{(c1 - c0) / n * 1e6:.2f} us per attempt", flush=True)
EOF
haproxy_head 5s > "$DIR/haproxy.cfg"
cat >> "$DIR/haproxy.cfg" <<CFG
frontend front
  bind 127.0.0.1:18080
  stick-table type ip size 100k expire 1m store conn_rate(1m)
  tcp-request connection track-sc0 src
  tcp-request connection reject if { sc0_conn_rate gt 5 }
  default_backend upstream
frontend ready
  bind 127.0.0.1:19090
backend upstream
  server s 127.0.0.1:9
CFG
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  for mode in kernel plain haproxy; do
    if [ "$mode" = haproxy ]; then
      haproxy -f "$DIR/haproxy.cfg" -db 2> "$DIR/haproxy.log" &
      PID=$!
    else
      tollgate_config 'listen = "127.0.0.1:19090"' 18080 9 5/1m > "$DIR/$mode.toml"
      if [ "$mode" = kernel ]; then
        printf '\n[kernel]\naction = "reset"\nrequired = true\n' >> "$DIR/$mode.toml"
      fi
      RUST_LOG=warn "$BIN" run --config "$DIR/$mode.toml" 2> "$DIR/$mode.log" &
      PID=$!
    fi
    PYTHONPATH="$SUPPORT" python3 "$DIR/flood.py" "$PID" "$mode" "$ATTEMPTS" 18080 19090
    kill -TERM "$PID"
    wait "$PID" || true
  done
done
