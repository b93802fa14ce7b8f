"""A reader of tokentrace traces written from docs/FORMAT.md alone, as a check that the spec
is complete: it needs nothing but zstd and XXH3 (`pip install zstandard xxhash`).

    python3 format/reference/read_trace.py tests/golden/finished.trace

It reads a finished trace front to back (no recovery: any damage stops it with an assertion)
and prints the header, the counts, and a few decoded values.
"""
import json
import struct
import sys

import xxhash
import zstandard

def h64(b): return xxhash.xxh3_64_intdigest(b)

data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'TOKTRACE'
major, minor, hlen = struct.unpack_from('<HHI', data, 8)
mono, real, shard, hl = struct.unpack_from('<QQIH', data, 16)
host = data[38:38+hl].decode()
assert h64(data[:hlen-8]) == struct.unpack_from('<Q', data, hlen-8)[0]
print('header', major, minor, mono, real, shard, host)

def frame(pos):
    magic = data[pos:pos+4]; assert magic == b'TTFR'
    kind, codec, rsv, seq, stored, raw = struct.unpack_from('<BBHIII', data, pos+4)
    hc, pc = struct.unpack_from('<IQ', data, pos+20)
    assert hc == h64(data[pos:pos+20]) & 0xffffffff
    payload = data[pos+32:pos+32+stored]
    assert h64(payload) == pc
    if codec == 1:
        payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=raw)
    assert len(payload) == raw
    return kind, seq, payload, pos+32+stored

kind, _, man, pos = frame(hlen); assert kind == 1
print('manifest model', json.loads(man)['model'])

class R:
    def __init__(s, b): s.b, s.p = b, 0
    def byte(s): v = s.b[s.p]; s.p += 1; return v
    def var(s):
        f = s.byte()
        if f <= 250: return f
        n = {251: 2, 252: 4, 253: 8}[f]
        v = int.from_bytes(s.b[s.p:s.p+n], 'little'); s.p += n; return v
    def zz(s):
        z = s.var(); return (z >> 1) ^ -(z & 1)
    def opt(s, f):
        t = s.byte(); assert t in (0, 1); return f() if t else None
    def string(s):
        n = s.var(); v = s.b[s.p:s.p+n].decode(); s.p += n; return v
    def seq(s, f, n=None):
        c = s.var(); assert n is None or c == n; return [f() for _ in range(c)]

M = 1 << 64
def block(b):
    r = R(b)
    ids = r.seq(r.zz); n = len(ids)
    phase = r.seq(r.byte, n); trial = r.seq(r.var, n); intended = r.seq(r.zz, n); send = r.seq(r.zz, n)
    headers = r.seq(lambda: r.opt(r.zz), n); end = r.seq(r.zz, n); status = r.seq(r.var, n); outcome = r.seq(r.byte, n)
    error = r.seq(lambda: r.opt(r.string), n)
    usage = [r.seq(lambda: r.opt(r.var), n) for _ in range(4)]
    finish = r.seq(lambda: r.opt(r.string), n)
    ph = r.seq(r.var, n); pb = r.seq(r.var, n); oh = r.seq(r.var, n); ob = r.seq(r.var, n); planned = r.seq(lambda: r.opt(r.var), n)
    rh = r.seq(lambda: r.seq(lambda: (r.string(), r.string())), n)
    counts = r.seq(r.var, n)
    arr = r.seq(r.zz); m = len(arr); assert sum(counts) == m
    read = r.seq(r.var, m); by = r.seq(r.var, m); ch = r.seq(r.byte, m); tl = r.seq(r.var, m); tok = r.seq(lambda: r.opt(r.var), m); text = r.seq(lambda: r.opt(r.string), m)
    out = []; pid = 0; pint = 0; c = 0
    for i in range(n):
        rid = (pid + ids[i]) % M; pid = rid
        it = (pint + intended[i]) % M; pint = it
        s = (it + send[i]) % M
        chunks = []; at = s; rd = 0
        for _ in range(counts[i]):
            at = (at + arr[c]) % M; rd = (rd + read[c]) % (1 << 32)
            chunks.append(dict(arrival=at, read=rd, bytes=by[c], channel=ch[c], text_len=tl[c], tokens=tok[c], text=text[c])); c += 1
        out.append(dict(id=rid, phase=phase[i], send=s, headers=None if headers[i] is None else (s + headers[i]) % M,
                        end=(s + end[i]) % M, status=status[i], outcome=outcome[i], error=error[i], finish=finish[i], headers_list=rh[i], chunks=chunks))
    return out

reqs = []; blocks = 0
while pos < len(data) - 24:
    kind, seq, payload, pos = frame(pos)
    if kind == 2: reqs += block(payload); blocks += 1
    elif kind == 3: print('run end', json.loads(payload)['reason'])
    elif kind == 4:
        re_off, cnt = struct.unpack_from('<QI', payload, 0); print('index entries', cnt)
foot = data[-24:]
assert foot[16:] == b'TTFOOTER' and h64(foot[:8]) == struct.unpack_from('<Q', foot, 8)[0]
print('blocks', blocks, 'requests', len(reqs), 'chunks', sum(len(r['chunks']) for r in reqs))
print(reqs[0]['chunks'][2], reqs[1]['error'], reqs[3]['headers_list'], reqs[3]['chunks'][23]['arrival'])
