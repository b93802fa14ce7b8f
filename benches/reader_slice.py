#!/usr/bin/env python3
"""A `--record-bin` wrapper for the e2e benchmark that gives the recorder's stream reader thread
a scheduler slice of its own (Linux 6.12 and later: `sched_setattr` with `sched_runtime` under
SCHED_OTHER, clamped by the kernel to 0.1-100 ms), leaving every other thread at the kernel's.

docs/performance/2026-12-07.md, "A shorter scheduler slice for the reader: tried, not kept",
measured it:

    cargo build --release --no-default-features --bin tokentrace-record
    cargo bench --bench e2e -- --levels 1000 --steps 10 --no-aiperf --no-floor \\
        --record-bin benches/reader_slice.py

Environment: READER_SLICE_NS (100000 by default), TOKENTRACE_RECORD_BIN (the binary started,
target/release/tokentrace-record by default). The slice read back from the kernel goes to
stderr (the bench keeps it in the level's record.err). This script's own CPU, about 0.1 s,
counts in the client's figures, since the bench measures the process it starts.
"""
import ctypes
import os
import struct
import subprocess
import sys
import time

SYS_SCHED_SETATTR, SYS_SCHED_GETATTR = 314, 315  # x86_64
# struct sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0, 48 bytes); the kernel accepts it.
ATTR = struct.Struct("IIQiIQQQ")
READER_COMM = "tokentrace-read"  # "tokentrace-reader", cut to the kernel's 15 characters
FIND_LIMIT_S = 10

libc = ctypes.CDLL(None, use_errno=True)


def set_slice(tid, slice_ns):
    """Sets the slice of thread `tid`, keeping its policy, flags and nice; returns the slice
    the kernel reports afterwards."""
    buf = ctypes.create_string_buffer(ATTR.size)
    if libc.syscall(SYS_SCHED_GETATTR, tid, buf, ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    _, policy, flags, nice, prio, _, deadline, period = ATTR.unpack_from(buf)
    ATTR.pack_into(buf, 0, ATTR.size, policy, flags, nice, prio, slice_ns, deadline, period)
    if libc.syscall(SYS_SCHED_SETATTR, tid, buf, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_setattr")
    if libc.syscall(SYS_SCHED_GETATTR, tid, buf, ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    return ATTR.unpack_from(buf)[5]


def reader_tid(pid):
    """The stream reader's thread id in process `pid`, or None while it has not started."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                if comm.read().strip() == READER_COMM:
                    return int(tid)
    except OSError:
        pass
    return None


def main():
    slice_ns = int(os.environ.get("READER_SLICE_NS", "100000"))
    binary = os.environ.get("TOKENTRACE_RECORD_BIN", "target/release/tokentrace-record")
    child = subprocess.Popen([binary] + sys.argv[1:])
    deadline = time.monotonic() + FIND_LIMIT_S
    while child.poll() is None and time.monotonic() < deadline:
        tid = reader_tid(child.pid)
        if tid is not None:
            try:
                got = set_slice(tid, slice_ns)
                print(f"reader_slice: thread {tid} slice {got} ns", file=sys.stderr)
            except OSError as err:
                print(f"reader_slice: thread {tid}: {err}", file=sys.stderr)
            break
        time.sleep(0.001)
    else:
        print("reader_slice: no stream reader thread seen", file=sys.stderr)
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
