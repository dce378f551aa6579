# What the shell benchmarks (benches/redis/per-request.sh, benches/kernel/refused.sh) share:
# a network namespace of their own, the tools they need, a process's CPU time, and the
# one-worker configs of Tollgate and HAProxy. Sourced:
#
#   . "$(dirname "$(realpath "$0")")/../support/harness.sh"
#   in_own_netns "$@"

# This folder (schedstat.py is here).
SUPPORT=$(dirname "$(realpath "${BASH_SOURCE[0]}")")

# Runs the calling script again, with the same arguments, in a network namespace of its own
# (`unshare -n`: root), unless this is that run; there, brings loopback up. The host's
# interfaces and ruleset are never touched.
in_own_netns() {
  if [ -z "${TOLLGATE_BENCH_NETNS:-}" ]; then
    exec env TOLLGATE_BENCH_NETNS=1 unshare -n bash "$0" "$@"
  fi
  ip link set lo up
}

# Exits, naming the first of the commands $@ that is not on the PATH.
needs() {
  for tool in "$@"; do
    command -v "$tool" > /dev/null || { echo "$tool is needed" >&2; exit 1; }
  done
}

# The CPU (seconds) of every task of every process in $@ (pids).
cpu() {
  python3 "$SUPPORT/schedstat.py" "$@"
}

# The same CPU seconds, then the user and the system ticks of those processes (`utime` and
# `stime` of /proc/PID/stat, 10 ms each: the proportion to split the seconds by), one line.
cpu_modes() {
  python3 "$SUPPORT/schedstat.py" --modes "$@"
}

# A Tollgate config on stdout: one worker thread, the line $1 in [admin], a listener `front`
# on 127.0.0.1:$2 in front of 127.0.0.1:$3, and one rule limiting each source to $4.
tollgate_config() {
  cat <<CFG
[proxy]
threads = 1

[admin]
$1

[[listener]]
name = "front"
listen = "127.0.0.1:$2"
upstreams = ["127.0.0.1:$3"]

[[rule]]
name = "per-source"
limits = [{ rate = "$4" }]
CFG
}

# The head of an HAProxy config on stdout: one thread, TCP, connect timeout 1 s, client and
# server timeouts $1; the frontends and backends follow.
haproxy_head() {
  cat <<CFG
global
  nbthread 1
defaults
  mode tcp
  timeout connect 1s
  timeout client $1
  timeout server $1
CFG
}
