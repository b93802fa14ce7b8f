"""A reader of tokentrace traces written from docs/FORMAT.md alone, as a check that the spec
is complete: it needs nothing but zstd and XXH3 (`pip install zstandard xxhash`).

    python3 format/reference/read_trace.py tests/golden/finished.trace

prints the header, the counts, and a few decoded values. As a module:

    from read_trace import read_trace
    t = read_trace('run.trace')
    t['header'], t['manifest'], t['run_end'], t['verdict']
    for r in t['requests']:          # completion order, as in the file
        r['id'], r['outcome'], r['usage'], [c['channel'] for c in r['chunks']]

Every checksum is verified; damage stops the reader with an AssertionError (it does not resync
past damage, section 8 of the spec). A trace without a valid footer (a killed writer) is read
up to its last complete frame and its verdict is `recovered N blocks`.
"""
import json
import struct
import sys

import xxhash
import zstandard

# Column 9 and 26 values, by position. Codes 11-14 appear only in column 31 (minor 2), whose
# entry replaces column 9's nearest 1.0 class (section 4.6).
OUTCOMES = ['ok', 'http_error', 'connect_error', 'stream_error', 'timeout', 'ttft_timeout',
            'malformed', 'oversize', 'cancelled', 'missing_done', 'other',
            'not_event_stream', 'unsupported_encoding', 'redirect', 'interrupted']
LEGACY = {11: 6, 12: 6, 13: 1, 14: 8}
INTERRUPTED = 14
CHANNELS = ['role', 'reasoning', 'content', 'tool', 'usage', 'finish', 'done', 'error', 'other']
PHASES = ['warmup', 'measured']

FRAME_KINDS = {1: 'manifest', 2: 'block', 3: 'run_end', 4: 'index'}
MAX_RAW = 256 << 20
M64 = 1 << 64


def h64(b):
    return xxhash.xxh3_64_intdigest(b)


class Incomplete(Exception):
    """The file ends inside a frame: what a killed writer leaves."""


def parse_header(data):
    assert data[:8] == b'TOKTRACE', 'not a trace (magic)'
    major, minor, hlen = struct.unpack_from('<HHI', data, 8)
    assert major == 1, f'format major {major} not known'
    assert 46 <= hlen <= len(data), 'header length'
    mono, real, shard, hl = struct.unpack_from('<QQIH', data, 16)
    assert 38 + hl + 8 <= hlen, 'host length'
    host = data[38:38 + hl].decode()
    # Bytes between the host and the checksum are a later minor's extension: skipped.
    assert h64(data[:hlen - 8]) == struct.unpack_from('<Q', data, hlen - 8)[0], 'header check'
    return dict(major=major, minor=minor, header_len=hlen, anchor_mono_ns=mono,
                anchor_realtime_ns=real, shard=shard, host=host)


def frame(data, pos):
    """(kind, seq, payload, next offset) of the frame at `pos`; Incomplete when it is cut."""
    if len(data) - pos < 32:
        raise Incomplete(pos)
    magic = data[pos:pos + 4]
    assert magic == b'TTFR', f'frame magic at {pos}'
    kind, codec, rsv, seq, stored, raw = struct.unpack_from('<BBHIII', data, pos + 4)
    hc, pc = struct.unpack_from('<IQ', data, pos + 20)
    assert hc == h64(data[pos:pos + 20]) & 0xffffffff, f'frame header check at {pos}'
    assert kind in FRAME_KINDS and codec in (0, 1) and rsv == 0 and raw <= MAX_RAW, \
        f'frame header fields at {pos}'
    if pos + 32 + stored > len(data):
        raise Incomplete(pos)
    payload = data[pos + 32:pos + 32 + stored]
    assert h64(payload) == pc, f'frame payload check at {pos}'
    if codec == 1:
        payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw)
    assert len(payload) == raw, f'frame raw length at {pos}'
    return kind, seq, payload, pos + 32 + stored


class R:
    """Cursor over a block payload with the bincode-standard element decoders (section 4.1)."""

    def __init__(s, b): s.b, s.p = b, 0

    def byte(s):
        v = s.b[s.p]; s.p += 1; return v

    def var(s):
        f = s.byte()
        if f <= 250: return f
        n = {251: 2, 252: 4, 253: 8}[f]
        v = int.from_bytes(s.b[s.p:s.p + n], 'little'); s.p += n; return v

    def zz(s):
        z = s.var(); return (z >> 1) ^ -(z & 1)

    def opt(s, f):
        t = s.byte(); assert t in (0, 1); return f() if t else None

    def string(s):
        n = s.var(); v = s.b[s.p:s.p + n].decode(); s.p += n; return v

    def seq(s, f, n=None):
        c = s.var()
        assert n is None or c == n, 'column length'
        assert c <= len(s.b) - s.p, 'column count exceeds the payload'
        return [f() for _ in range(c)]


def block(b, minor=0):
    """The final records of one block payload, each with its chunks (sections 4.3-4.6).

    `minor` is the file's format minor: from 1 on, column 30 (retries) may follow the chunk
    columns; from 2 on, column 31 (outcome detail) and the checkpoint section.
    """
    return block_with_checkpoints(b, minor)[0]


def block_with_checkpoints(b, minor=0):
    """(final records, checkpoints) of one block payload; a checkpoint is a request dict with
    its new chunks and `chunk_offset`."""
    r = R(b)
    finals = records(r, minor)
    checkpoints = []
    # Minor 2: the checkpoint section, one byte string holding columns 1-31 of the
    # checkpointed requests, then their chunk offsets.
    if minor >= 2 and r.p < len(b):
        size = r.var()
        assert size <= len(b) - r.p, 'checkpoint section exceeds the payload'
        section = b[r.p:r.p + size]; r.p += size
        if size:
            cr = R(section)
            checkpoints = records(cr, minor)
            offsets = cr.seq(cr.var, len(checkpoints))
            for c, off in zip(checkpoints, offsets):
                c['chunk_offset'] = off
    # Bytes from here on are later minor versions' columns: ignored.
    return finals, checkpoints


def records(r, minor):
    """Columns 1-31 read from `r`: the requests of a block or of its checkpoint section."""
    ids = r.seq(r.zz); n = len(ids)
    phase = r.seq(r.byte, n); trial = r.seq(r.var, n)
    intended = r.seq(r.zz, n); send = r.seq(r.zz, n)
    headers = r.seq(lambda: r.opt(r.zz), n); end = r.seq(r.zz, n)
    status = r.seq(r.var, n); outcome = r.seq(r.byte, n)
    assert all(o <= 10 for o in outcome), 'outcome code above 10 in column 9'
    error = r.seq(lambda: r.opt(r.string), n)
    usage = [r.seq(lambda: r.opt(r.var), n) for _ in range(4)]
    finish = r.seq(lambda: r.opt(r.string), n)
    ph = r.seq(r.var, n); pb = r.seq(r.var, n); oh = r.seq(r.var, n); ob = r.seq(r.var, n)
    planned = r.seq(lambda: r.opt(r.var), n)
    rh = r.seq(lambda: r.seq(lambda: (r.string(), r.string())), n)
    counts = r.seq(r.var, n)
    arr = r.seq(r.zz); m = len(arr); assert sum(counts) == m, 'chunk_count sum'
    read = r.seq(r.var, m); by = r.seq(r.var, m); ch = r.seq(r.byte, m)
    tl = r.seq(r.var, m); tok = r.seq(lambda: r.opt(r.var), m)
    text = r.seq(lambda: r.opt(r.string), m)
    # Column 30 (minor 1): times each request was resent on a fresh connection after a reused
    # keep-alive connection failed. Absent from 1.0 blocks, where it counts as 0.
    retries = r.seq(r.byte, n) if minor >= 1 and r.p < len(r.b) else [0] * n
    # Column 31 (minor 2): the outcome when 1.1 has no name for it, else 0.
    detail = r.seq(r.byte, n) if minor >= 2 and r.p < len(r.b) else [0] * n
    for i, d in enumerate(detail):
        if d:
            assert LEGACY.get(d) == outcome[i], f'outcome detail {d} with code {outcome[i]}'
            outcome[i] = d
    out = []; pid = 0; pint = 0; c = 0
    for i in range(n):
        rid = (pid + ids[i]) % M64; pid = rid
        it = (pint + intended[i]) % M64; pint = it
        s = (it + send[i]) % M64
        chunks = []; at = s; rd = 0
        for _ in range(counts[i]):
            at = (at + arr[c]) % M64; rd = (rd + read[c]) % (1 << 32)
            chunks.append(dict(arrival=at, read=rd, bytes=by[c], channel=ch[c], text_len=tl[c],
                               tokens=tok[c], text=text[c]))
            c += 1
        out.append(dict(
            id=rid, phase=phase[i], trial=trial[i], intended=it, send=s,
            headers=None if headers[i] is None else (s + headers[i]) % M64,
            end=(s + end[i]) % M64, status=status[i], outcome=outcome[i], error=error[i],
            usage=dict(prompt_tokens=usage[0][i], completion_tokens=usage[1][i],
                       reasoning_tokens=usage[2][i], cached_tokens=usage[3][i]),
            finish=finish[i], prompt_hash=ph[i], prompt_bytes=pb[i], output_hash=oh[i],
            output_bytes=ob[i], planned_input_tokens=planned[i], headers_list=rh[i],
            retries=retries[i], chunks=chunks))
    return out


class Interrupted:
    """Chains checkpoints, in file order, into the requests that never got a final record
    (section 4.6): a final record forgets its request; a gap keeps the prefix before it."""

    def __init__(s):
        s.open, s.order = {}, []

    def add(s, finals, checkpoints):
        for c in checkpoints:
            c = dict(c); off = c.pop('chunk_offset'); c['outcome'] = INTERRUPTED
            held = s.open.get(c['id'])
            if held is None:
                s.order.append(c['id'])
                c['gap'] = 0 if off > 0 else None
                if off > 0:
                    c['chunks'] = []
                s.open[c['id']] = c
                continue
            chunks, gap = held['chunks'], held['gap']
            if gap is None:
                if off > len(chunks):
                    gap = len(chunks)
                else:
                    chunks = chunks + c['chunks'][len(chunks) - off:]
            c['chunks'], c['gap'] = chunks, gap
            s.open[c['id']] = c
        for f in finals:
            s.open.pop(f['id'], None)

    def finish(s):
        out = []
        for rid in s.order:
            c = s.open.pop(rid, None)
            if c is None:
                continue
            gap = c.pop('gap')
            c['error'] = ('interrupted: still streaming when the recorder stopped; '
                          f"{len(c['chunks'])} chunks up to its last checkpoint" if gap is None else
                          'interrupted: still streaming when the recorder stopped; the first '
                          f'{gap} chunks only (a later part was in a damaged block)')
            out.append(c)
        return out


def footer(data, start):
    """Offset of the index frame when the file ends with a valid footer (section 3.3), else None."""
    if len(data) - start < 24 + 32:
        return None
    foot = data[-24:]
    if foot[16:] != b'TTFOOTER' or h64(foot[:8]) != struct.unpack_from('<Q', foot, 8)[0]:
        return None
    off = struct.unpack_from('<Q', foot, 0)[0]
    if not start <= off <= len(data) - 24 - 32:
        return None
    try:
        kind, _, _, nxt = frame(data[:len(data) - 24], off)
    except (AssertionError, Incomplete):
        return None
    return off if kind == 4 and nxt == len(data) - 24 else None


def read_trace(path, on_frame=None):
    """Decode a whole trace. `on_frame(kind_name, seq, payload)` sees every frame in file order.

    Returns a dict: header, manifest, run_end (None without one), index (list of entries, or
    None), blocks (count), requests (every final record of every complete block, in file
    order, then the interrupted requests checkpoints describe), interrupted (their count),
    verdict ('ok' or 'recovered N blocks').
    """
    data = path if isinstance(path, (bytes, bytearray)) else open(path, 'rb').read()
    header = parse_header(data)
    kind, _, man, pos = frame(data, header['header_len'])
    assert kind == 1, 'first frame is not the manifest'
    if on_frame: on_frame('manifest', 0, man)
    manifest = json.loads(man)
    idx_off = footer(data, pos)
    stop = len(data) - 24 if idx_off is not None else len(data)
    requests, blocks, run_end, index, next_seq = [], 0, None, None, 0
    merge = Interrupted()
    while pos < stop:
        try:
            kind, seq, payload, pos = frame(data, pos)
        except Incomplete:
            break
        if on_frame: on_frame(FRAME_KINDS[kind], seq, payload)
        if kind == 2:
            assert seq == next_seq, f'block seq {seq}, expected {next_seq}'
            next_seq += 1
            finals, checkpoints = block_with_checkpoints(payload, header['minor'])
            requests += finals; blocks += 1
            merge.add(finals, checkpoints)
        elif kind == 3:
            run_end = json.loads(payload)
        elif kind == 4 and idx_off is not None:
            _, cnt = struct.unpack_from('<QI', payload, 0)
            assert len(payload) == 12 + 40 * cnt, 'index length'
            index = [dict(zip(('offset', 'seq', 'requests', 'chunks', 'min_send_ns', 'max_end_ns'),
                              struct.unpack_from('<QIIQQQ', payload, 12 + 40 * i)))
                     for i in range(cnt)]
        # An index found by scanning a file without a valid footer is not trusted: ignored.
    # Checkpoints matter without a run end (a killed writer), or when the writer said some
    # checkpointed request never got its final record.
    unfinished = (run_end or {}).get('client_health', {}).get('checkpointed_without_final', 0)
    interrupted = merge.finish() if run_end is None or unfinished else []
    requests += interrupted
    if idx_off is not None:
        assert index is not None and len(index) == blocks, 'index does not list every block'
        assert run_end is not None, 'finished trace without a run end'
        verdict = 'ok'
    else:
        verdict = f'recovered {blocks} blocks'
    return dict(header=header, manifest=manifest, run_end=run_end, index=index, blocks=blocks,
                requests=requests, interrupted=len(interrupted), verdict=verdict)


def main(argv):
    def show(kind, seq, payload):
        if kind == 'manifest':
            print('manifest model', json.loads(payload)['model'])
        elif kind == 'run_end':
            print('run end', json.loads(payload)['reason'])
        elif kind == 'index':
            print('index entries', struct.unpack_from('<QI', payload, 0)[1])

    data = open(argv[1], 'rb').read()
    h = parse_header(data)
    print('header', h['major'], h['minor'], h['anchor_mono_ns'], h['anchor_realtime_ns'],
          h['shard'], h['host'])
    t = read_trace(data, on_frame=show)
    if t['verdict'] != 'ok':
        print(t['verdict'])
    reqs = t['requests']
    print('blocks', t['blocks'], 'requests', len(reqs), 'chunks', sum(len(r['chunks']) for r in reqs),
          'interrupted', t['interrupted'])
    for r in reqs:
        if r['outcome'] > 10:
            print('request', r['id'], OUTCOMES[r['outcome']], len(r['chunks']), 'chunks,', r['error'])
    # A few decoded values the golden files' tests spell out (format/tests/common/mod.rs).
    if len(reqs) > 3 and len(reqs[0]['chunks']) > 2 and len(reqs[3]['chunks']) > 23:
        print(reqs[0]['chunks'][2], reqs[1]['error'], reqs[3]['headers_list'],
              reqs[3]['chunks'][23]['arrival'])


if __name__ == '__main__':
    main(sys.argv)
