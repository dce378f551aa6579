"""The CPU time of processes, read from /proc/PID/task/*/schedstat (its first field: the
nanoseconds every task spent on a CPU), for the shell benchmarks: imported (`cpu_seconds`),
or run with the pids as arguments (prints the seconds)."""
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


if __name__ == "__main__":
    print(f"{cpu_seconds(sys.argv[1:]):.6f}")
