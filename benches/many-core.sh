#!/usr/bin/env bash
# The threads bench as issue 29's goals are checked: a quiet machine of 16 cores or more.
#
#   benches/many-core.sh [OUT_DIR]
#
# Builds the threads bench (release), prints the machine (CPU model, cores, caches, load), and
# runs it once: 1, 2, 4, 8 and 16 threads, 2 MiB and 32 MiB, the shared-hot-key, disjoint-key
# and frames workloads, 3 rounds (the tables show medians), Tollgate's contenders with
# reservations on (the default shift, 8) and off (`-off` columns, `filter-off` for frames) and
# pingora-limits, all in the same process. The tables go to stdout and to OUT_DIR (default a
# new temporary folder, named at the end): threads.txt (the tables as printed), threads.csv
# (their rows) and machine.txt. Runs from the repository root; needs cargo and nothing else.
#
# It has not been run yet: no machine with that many cores was lent to the sessions that wrote
# it (see benches/README.md, "Many threads"). On a 16-core machine the run takes a few minutes
# (the 2-core VM: about 6 minutes for 1, 2 and 4 threads).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/tollgate-many-core.XXXXXX)}
mkdir -p "$out"

cores=$(nproc)
if [ "$cores" -lt 16 ]; then
    echo "warning: $cores CPUs here; the 16-thread rows will share cores" >&2
fi

cargo build --release -p tollgate-benches --bin threads

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpus: $cores"
    lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|L1d|L2|L3|NUMA node\(s\))' || true
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} | tee "$out/machine.txt"

target/release/threads \
    --threads 1,2,4,8,16 \
    --memory 2MiB,32MiB \
    --workloads shared,disjoint,frames \
    --reserve-shift 8,none \
    --rounds 3 \
    --csv "$out/threads.csv" | tee "$out/threads.txt"

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" | tee -a "$out/machine.txt"
echo "tables in $out"
