#!/usr/bin/env bash
# Fuzz smoke run: every target for a short fixed time from its corpus; fails on any crash or
# hang. Installs cargo-afl from crates.io if missing (it builds AFL++ from the crate's own
# sources: make and a C compiler are all it needs), builds the targets instrumented into
# target/afl (apart from the ordinary build), and runs them one at a time.
#
#   bash tests/fuzz/smoke.sh              # 30 s per target
#   FUZZ_SECONDS=900 bash tests/fuzz/smoke.sh frame   # a longer run of one target
#
# A crashing or hanging input is left in target/fuzz-smoke/<target>/default/{crashes,hangs}:
# fix the parser, then copy the input into tests/fuzz/regressions/<target>/ so that
# `cargo test -p tollgate-fuzz` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${FUZZ_SECONDS:-30}
afl_version=0.18.2
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(frame proxy_header config descriptors capture state admin cluster_lists)
fi

if ! cargo afl --version 2>/dev/null | grep -q "$afl_version"; then
  echo "==> installing cargo-afl $afl_version (builds AFL++)"
  cargo install cargo-afl --locked --version "$afl_version"
fi
# The AFL++ runtime is built per rustc version: a new toolchain needs it again. Once built,
# `config --build` refuses to redo it, which is not an error here.
cargo afl config --build >/dev/null 2>&1 || true

echo "==> building the fuzz targets (instrumented, target/afl)"
CARGO_TARGET_DIR=target/afl cargo afl build --release --locked \
  -p tollgate-fuzz --features afl --bins

# No network while fuzzing: a config naming a host would make the proxy's parser ask DNS.
# The harness skips such inputs; a fresh network namespace (root only) makes sure of it.
isolate=()
if unshare -n true 2>/dev/null; then
  isolate=(unshare -n)
fi

export AFL_NO_UI=1                              # plain status lines, no curses screen
export AFL_SKIP_CPUFREQ=1                       # VMs have no CPU governor to check
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1  # core dumps may go to systemd-coredump
export AFL_NO_AFFINITY=1                        # shared cores: do not insist on a free one
export AFL_NO_STARTUP_CALIBRATION=1             # start at once: a smoke run is short

# One target's run: its status line, then FAIL lines for anything it found; its exit status
# says whether it passed.
fuzz_one() {
  local target=$1 out=target/fuzz-smoke/$1 dict=() kind found stats ok=0
  rm -rf "$out"
  mkdir -p "$out"
  if [ -f "tests/fuzz/dict/$target.dict" ]; then
    dict=(-x "tests/fuzz/dict/$target.dict")
  fi
  echo "==> fuzzed $target for ${seconds}s"
  # -t 2000: an input that takes 2 s is a hang (a normal one takes microseconds).
  "${isolate[@]}" cargo afl fuzz -V "$seconds" -t 2000 "${dict[@]}" \
    -i "tests/fuzz/corpus/$target" -o "$out" -- "target/afl/release/fuzz_$target" \
    >"$out/afl.log" 2>&1 || { tail -20 "$out/afl.log"; return 1; }
  stats=$out/default/fuzzer_stats
  grep -E '^(execs_done|execs_per_sec|corpus_count|edges_found|total_edges|saved_crashes|saved_hangs)' "$stats" \
    | tr -s ' ' | paste -sd' ' -
  for kind in crashes hangs; do
    found=$(find "$out/default/$kind" -name 'id:*' 2>/dev/null | wc -l)
    if [ "$found" -gt 0 ]; then
      echo "FAIL: $target: $found input(s) in $out/default/$kind"
      ok=1
    fi
  done
  return "$ok"
}

# As many targets at once as there are cores (FUZZ_JOBS overrides): each fuzzer is one
# process on one core, so on CI's two cores the smoke run takes half the time. Each
# target's lines are printed whole once it ends, so they do not interleave.
jobs_at_once=${FUZZ_JOBS:-$(nproc)}
mkdir -p target/fuzz-smoke
failed=0
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  {
    fuzz_one "$target" >"target/fuzz-smoke/$target.said" 2>&1 && status=0 || status=$?
    cat "target/fuzz-smoke/$target.said"
    exit "$status"
  } &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
exit "$failed"
