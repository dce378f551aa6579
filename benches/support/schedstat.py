"""The CPU time of processes, read from /proc/PID/task/*/schedstat (its first field: the
nanoseconds every task spent on a CPU), for the shell benchmarks: imported (`cpu_seconds`,
`mode_ticks`), or run with the pids as arguments (prints the seconds; with `--modes` first,
the seconds, then the user and the system ticks of `mode_ticks`)."""
import os
import sys


def cpu_seconds(pids):
    """The CPU seconds of every task of every process in `pids` (a task that ends while it is
    read is passed over)."""
    total = 0
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except OSError:
                pass
    return total / 1e9


def mode_ticks(pids):
    """`(user, system)`: the `utime` and `stime` clock ticks (10 ms each) so far of every
    process in `pids`, from /proc/PID/stat (which counts every thread of a process, ended ones
    too), as benches/support/cpu.rs reads them for the load tool. Too coarse to be times of
    their own over a short run, they give the proportion in which to split `cpu_seconds`."""
    user = system = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            # After the command name (which may hold spaces and parentheses): field 3 is the
            # state, so utime and stime (fields 14 and 15) are at 11 and 12.
            fields = stat.read().rsplit(")", 1)[1].split()
        user += int(fields[11])
        system += int(fields[12])
    return user, system


def split(seconds, before, after):
    """`seconds` (a `cpu_seconds` difference) split into `(user, system)` in the proportion of
    the ticks counted from `before` to `after` (`mode_ticks` pairs); `None` when no tick was
    counted in between (too short a run to say)."""
    user = after[0] - before[0]
    system = after[1] - before[1]
    if user + system <= 0:
        return None
    user_seconds = seconds * user / (user + system)
    return user_seconds, seconds - user_seconds


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--modes"]:
        ticks = mode_ticks(args[1:])
        print(f"{cpu_seconds(args[1:]):.6f} {ticks[0]} {ticks[1]}")
    else:
        print(f"{cpu_seconds(args):.6f}")
