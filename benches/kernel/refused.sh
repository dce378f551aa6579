#!/bin/bash
# Proxy CPU per refused connection attempt from a held source, with [kernel] and without,
# in a network namespace this script makes for itself (root, unshare, nft, python3):
#
#   bash benches/kernel/refused.sh [BINARY] [ATTEMPTS]
#
# BINARY defaults to target/debug/tollgate, ATTEMPTS to 20000. The source 127.0.0.2 goes over
# a 5/1m limit with 20 attempts; then ATTEMPTS more are timed, and the proxy's CPU is read
# from /proc/PID/task/*/schedstat before and after (so its background work, the updater's
# ticks, is counted too). With [kernel] the attempts are refused by the kernel (action reset);
# without, by the proxy at accept.
set -euo pipefail
BIN=$(realpath "${1:-target/debug/tollgate}")
ATTEMPTS=${2:-20000}
if [ -z "${TOLLGATE_REFUSED_NETNS:-}" ]; then
  exec env TOLLGATE_REFUSED_NETNS=1 unshare -n bash "$0" "$BIN" "$ATTEMPTS"
fi
ip link set lo up
DIR=$(mktemp -d)
cat > "$DIR/flood.py" <<'EOF'
import os, socket, subprocess, sys, time
pid, mode, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for _ in range(250):
    try:
        socket.create_connection(("127.0.0.1", 19090), timeout=1).close()
        break
    except OSError:
        time.sleep(0.02)
def attempt():
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    try:
        s.connect(("127.0.0.1", 18080))
        s.recv(1)
    except OSError:
        pass
    finally:
        s.close()
def cpu():
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{task}/schedstat").read().split()[0])
        except OSError:
            pass
    return total / 1e9
for _ in range(20):
    attempt()
time.sleep(0.5)
if mode == "kernel":
    listed = subprocess.run(["nft", "list", "set", "inet", "tollgate", "v4_hosts"],
                            capture_output=True, text=True).stdout
    assert "127.0.0.2" in listed, listed
c0, t0 = cpu(), time.time()
for _ in range(n):
    attempt()
c1, t1 = cpu(), time.time()
print(f"{mode:>6}: {n} refused attempts in {t1 - t0:.2f} s, proxy CPU {c1 - c0:.4f} s = "
      f"{(c1 - c0) / n * 1e6:.2f} us per attempt")
EOF
for mode in kernel plain; do
  cat > "$DIR/$mode.toml" <<CFG
[proxy]
threads = 1

[admin]
listen = "127.0.0.1:19090"

[[listener]]
name = "front"
listen = "127.0.0.1:18080"
upstreams = ["127.0.0.1:9"]

[[rule]]
name = "r"
limits = [{ rate = "5/1m" }]
CFG
  if [ "$mode" = kernel ]; then
    printf '\n[kernel]\naction = "reset"\nrequired = true\n' >> "$DIR/$mode.toml"
  fi
  RUST_LOG=warn "$BIN" run --config "$DIR/$mode.toml" 2> "$DIR/$mode.log" &
  PID=$!
  python3 "$DIR/flood.py" "$PID" "$mode" "$ATTEMPTS"
  kill -TERM "$PID"
  wait "$PID" || true
done
rm -rf "$DIR"
