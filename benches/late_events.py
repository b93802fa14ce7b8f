#!/usr/bin/env python3
"""When and how the recorder's late events came, in one level of the e2e benchmark kept with
`--keep`: its trace joined with the simulator's truth log on request id and event index, as the
bench joins them, then every event stamped 100 us or more after its write, counted

- by its write time, in 5 ms bins from the level's first write (a burst shows as a few bins);
- by how late it was, in whole milliseconds (a step late shows as the step);
- by how many events its read returned (a read that came after the server's next write on the
  connection returns two or more, and every one of them takes the last one's receive time);
- by its place from its response's end (1: the last event), the ten commonest places.

docs/performance/2026-12-07.md, "A third host: the receive time at 100k chunks/s beside a stamped
floor", used it at 1,000 streams x 10 ms:

    cargo bench --bench e2e -- --levels 1000 --steps 10 --no-aiperf --no-floor --keep
    PY=~/.cache/tokentrace-conformance/venv-aiperf/bin/python   # any Python with pyarrow
    $PY benches/late_events.py target/e2e/c1000-s10

It reads the trace through `tokentrace export parquet` (into LEVEL_DIR/late-events/), so the
`tokentrace` binary must be built (`cargo build --release`), or named as the second argument.

Usage: late_events.py LEVEL_DIR [TOKENTRACE_BIN]
"""
import collections
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq

LATE_NS = 100_000
# docs/FORMAT.md (request ids): the UUID's last 62 bits are the id, under the variant bits 0b10.
MAX_REQUEST_ID = (1 << 62) - 1


def request_id(text):
    """The recorder's request id of a truth-log line's id (a number or the request's UUID): the
    rule of `tokentrace_format::request_id::id_of_uuid`, which the bench's own join calls
    (`benches/e2e/accuracy.rs`); no export carries the UUID, so this script repeats it."""
    try:
        return int(text)
    except ValueError:
        low = int(text.replace("-", ""), 16) & ((1 << 64) - 1)
        return low & MAX_REQUEST_ID if low >> 62 == 0b10 else None


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    level = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    binary = sys.argv[2] if len(sys.argv) == 3 else os.path.join(
        here, "..", "target", "release", "tokentrace")
    trace = os.path.join(level, "trace.tt")
    truth_path = os.path.join(level, "truth-recorder.jsonl")
    out = os.path.join(level, "late-events")
    info = json.loads(subprocess.check_output([binary, "inspect", "--json", trace]))
    anchor = info["clock_anchor"]["mono_ns"]
    subprocess.run([binary, "export", "parquet", trace, "-o", out, "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    chunks = pq.read_table(os.path.join(out, "chunks.parquet"),
                           columns=["id", "chunk_index", "arrival_ns", "read_index"]).to_pydict()
    written = {}
    with open(truth_path) as lines:
        for line in lines:
            row = json.loads(line)
            rid = request_id(row["request_id"])
            if rid is not None:
                written[(rid, row["chunk_index"])] = row["mono_ns"]
    if not written:
        sys.exit(f"{truth_path}: no events")
    first_write = min(written.values())
    # (request, index, arrival, read, write) of every event both sides have.
    events = []
    for rid, index, arrival, read in zip(chunks["id"], chunks["chunk_index"],
                                         chunks["arrival_ns"], chunks["read_index"]):
        write = written.get((rid, index))
        if write is not None:
            events.append((rid, index, anchor + arrival, read, write))
    if not events:
        sys.exit("no event of the trace is in the truth log")
    errors = sorted(arrival - write for _, _, arrival, _, write in events)
    n = len(errors)
    late = [e for e in events if e[2] - e[4] >= LATE_NS]
    print(f"events joined {n} of {len(chunks['id'])} in the trace; error p50 "
          f"{errors[n // 2] / 1e3:.1f} us, p99 {errors[min(n - 1, n * 99 // 100)] / 1e3:.1f} us; "
          f"{len(late)} at 100 us or later ({100 * len(late) / n:.2f}%)")
    if not late:
        return
    per_read = collections.Counter((rid, read) for rid, _, _, read, _ in events)
    per_request = collections.Counter(rid for rid, *_ in events)

    def show(title, counts, most=None):
        shown = sorted(counts.most_common(most) if most else counts.items())
        print(f"{title}: " + ", ".join(f"{k}: {v}" for k, v in shown))

    show("by write time (5 ms bins, ms from the first write)",
         collections.Counter(int((e[4] - first_write) / 5e6) * 5 for e in late))
    show("by lateness (whole ms)", collections.Counter((e[2] - e[4]) // 1_000_000 for e in late))
    show("by events in their read", collections.Counter(per_read[(e[0], e[3])] for e in late))
    show("by place from the response's end (the ten most)",
         collections.Counter(per_request[e[0]] - e[1] for e in late), 10)


if __name__ == "__main__":
    main()
