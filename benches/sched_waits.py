#!/usr/bin/env python3
"""What a thread waited behind, from `perf sched timehist` output: each time the thread waited
at least THRESHOLD_MS for a core after it was woken, the time of every core over that wait,
by the thread (comm) that had it, `<idle>` for none. It also prints the thread's longest
unbroken run, its busy time per tenth of a second from its first run, and the median of
those tenths between FROM_S and TO_S seconds (the whole run by default).

docs/performance/2026-12-07.md, "A shorter scheduler slice for the reader: tried, not kept", used it
on the recorder's stream reader (comm `tokentrace-read`) at 1,000 streams x 10 ms:

    printf '#!/bin/sh\\nexec perf sched record -q -o /tmp/ps.data -- B "$@"\\n' > /tmp/w.sh
    chmod +x /tmp/w.sh   # B: the recorder binary (or benches/reader_slice.py)
    cargo bench --bench e2e -- --levels 1000 --steps 10 --no-aiperf --no-floor \\
        --record-bin /tmp/w.sh
    perf sched timehist -i /tmp/ps.data > /tmp/th.txt
    benches/sched_waits.py /tmp/th.txt tokentrace-read 1.0 0.5 2.1

(`perf sched record` records every core, so the simulator's threads show too; its server
thread is named `tokentrace`, after its binary.)

Usage: sched_waits.py TIMEHIST_FILE THREAD_COMM_PREFIX [THRESHOLD_MS [FROM_S TO_S]]
"""
import collections
import re
import statistics
import sys


def parse(path):
    """(cpu, start s, end s, comm, wait ms) per run, from timehist's lines: the time a run
    ended, its cpu, the task, its wait time, its scheduling delay and its run time (ms)."""
    runs = []
    with open(path) as lines:
        for line in lines:
            fields = line.split()
            if len(fields) < 6:
                continue
            try:
                end = float(fields[0])
                cpu = int(fields[1].strip("[]"))
                delay_ms, run_ms = float(fields[-2]), float(fields[-1])
            except ValueError:
                continue  # the header lines
            comm = re.sub(r"\[.*", "", " ".join(fields[2:-3]))
            runs.append((cpu, end - run_ms / 1000, end, comm, delay_ms))
    return runs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, prefix = sys.argv[1], sys.argv[2]
    threshold = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    window = (float(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else None
    runs = parse(path)
    mine = [r for r in runs if r[3].startswith(prefix)]
    if not mine:
        sys.exit(f"no run of a thread named {prefix}* in {path}")
    # A run's wait for a core ends where the run starts.
    waits = [(start - delay / 1000, start, delay) for _, start, _, _, delay in mine if delay >= threshold]
    held = collections.Counter()
    for begin, end, _ in waits:
        for _, start, stop, comm, _ in runs:
            overlap = min(end, stop) - max(begin, start)
            if overlap > 0:
                held[comm] += overlap * 1000
    longest_run = max((stop - start) * 1000 for _, start, stop, _, _ in mine)
    print(f"{prefix}: {len(mine)} runs; {len(waits)} waits of {threshold} ms or more, "
          f"{sum(w[2] for w in waits):.1f} ms in all, the longest "
          f"{max(r[4] for r in mine):.1f} ms; longest run {longest_run:.1f} ms")
    total = sum(held.values())
    for comm, ms in held.most_common():
        print(f"  {ms:8.1f} ms  {100 * ms / total:5.1f}%  {comm}")
    first = min(start for _, start, _, _, _ in mine)
    busy = collections.Counter()
    for _, start, stop, _, _ in mine:
        busy[int((stop - first) * 10)] += (stop - start) * 1000
    tenths = [busy[t] for t in range(max(busy) + 1)]
    lo, hi = (round(window[0] * 10), round(window[1] * 10)) if window else (0, len(tenths))
    chosen = tenths[lo:hi] or tenths
    print(f"busy ms per 100 ms: median {statistics.median(chosen):.0f} "
          f"(tenths {lo} to {lo + len(chosen) - 1}); all: {' '.join(f'{b:.0f}' for b in tenths)}")


if __name__ == "__main__":
    main()
