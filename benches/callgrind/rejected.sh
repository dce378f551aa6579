#!/usr/bin/env bash
# Instructions per rejected connection, counted by callgrind in `tollgate run`.
#
#   benches/callgrind/rejected.sh BINARY [N] [SOURCES]
#
# Starts BINARY (a release build; `[profile.release] debug = 1` names its functions) under
# valgrind --tool=callgrind with instrumentation off, waits for the listener, switches
# counting on, opens N connections (default 2000) from SOURCES distinct addresses of
# 127.9.0.0/16 (default 4; each warmed once first, so every counted connection is rejected by
# the rule `blocked`, 1/1h, action reset), switches counting off, dumps, and prints the
# inclusive instructions of the accept path's functions divided by N. Loopback only; the
# proxy is stopped at the end (SIGTERM), the output stays in a temporary folder it names.
set -euo pipefail
binary=${1:?usage: rejected.sh BINARY [N] [SOURCES]}
n=${2:-2000}
sources=${3:-4}
dir=$(mktemp -d /tmp/tollgate-callgrind.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/tollgate.toml" <<TOML
[sketch]
memory = "4MiB"

[proxy]
threads = 1
log_rejections = 0
drain = "1s"

[admin]
enabled = false

[[listener]]
name = "echo"
listen = "127.0.0.1:$port"
upstreams = ["127.0.0.1:9"]

[[rule]]
name = "per-source"
limits = [{ rate = "1000000/10s" }]

[[rule]]
name = "blocked"
sources = ["127.9.0.0/16"]
limits = [{ rate = "1/1h" }]
action = "reset"
TOML
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
    "$binary" run --config "$dir/tollgate.toml" > "$dir/proxy.log" 2>&1 &
proxy=$!
trap 'kill "$proxy" 2>/dev/null || true' EXIT
connect() {
    python3 - "$port" "$1" "$sources" <<'PY'
import socket, sys
port, count, sources = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(count):
    s = socket.socket()
    s.settimeout(5)
    s.bind((f"127.9.0.{1 + i % sources}", 0))
    try:
        s.connect(("127.0.0.1", port))
        s.recv(1)  # the reset (or close) ends the connection
    except OSError:
        pass  # reset: the rejection
    s.close()
PY
}
for _ in $(seq 300); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
    sleep 0.2
done
connect "$sources"   # warm-up: each source's one allowed connection
callgrind_control -i on "$proxy" > /dev/null
connect "$n"
callgrind_control -i off "$proxy" > /dev/null
callgrind_control -d "$proxy" > /dev/null
kill -TERM "$proxy"; wait "$proxy" || true
trap - EXIT
out=$(ls -S "$dir"/callgrind.out* | head -1)
echo "callgrind output: $out (N=$n, $sources sources)"
callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk -v n="$n" '
    /^ *[0-9,]+ / && /(tcp::arrive|Gate::account|Gate::judge|Gate::rejected|Offenders::record|Metrics::throttled|Metrics::refused|Metrics::shadow_throttled|RuleCounters|Policy::decide|PROGRAM TOTALS)/ {
        count = $1; gsub(",", "", count);
        printf "%10.0f per connection  %s\n", count / n, $0
    }' | sort -k1,1nr | head -25
