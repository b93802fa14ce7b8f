"""The tap's HTTP/2 reading, held to a conversation python-hyper's `h2` writes.

The servers in the suite use few of HTTP/2's shapes (no padding, no CONTINUATION, no trailers,
no resets). Here `h2`'s own client and server state machines write a conversation that uses
them all, and the tap's `H2Connection` must read it as it was written, whole and however its
writes are cut: each stream's request, status, events and how it ended.

    run() -> (ok, figure, problems)
"""
import json
import random

import h2.config
import h2.connection
import h2.events
import h2.settings

import tap

TRIALS = 100
EVENTS = [f'data: {{"choices":[{{"index":0,"delta":{{"content":"tok{i} é"}}}}]}}\n\n'
          for i in range(6)] + ['data: [DONE]\n\n']


class Log:
    """Stands in for the tap: keeps what it would write."""

    def __init__(self):
        self.records = []

    def write(self, rec):
        self.records.append(rec)


def conversation():
    """[(side, bytes)] in the order the tap would forward them, and what each stream holds."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    wire = []

    def flush(first='request'):
        sides = [('request', client, server), ('response', server, client)]
        for side, conn, peer in sides if first == 'request' else sides[::-1]:
            data = conn.data_to_send()
            if data:
                wire.append((side, data))
                peer.receive_data(data)

    client.initiate_connection()
    server.initiate_connection()
    flush()
    flush()  # the client's ACK: h2 takes any ACK for all its pending SETTINGS
    body = json.dumps({'model': 'm', 'stream': True, 'max_tokens': 6}).encode()
    head = [(':method', 'POST'), (':path', '/v1/chat/completions'), (':scheme', 'http'),
            (':authority', '127.0.0.1'), ('x-request-id', 'req-1'),
            # Longer than a frame even compressed: HEADERS and CONTINUATION frames.
            ('x-filler', ''.join(random.Random(2).choices('abcdefghijklmnopqrstuvwxyz0123456789',
                                                          k=30000)))]
    # The server shrinks the client's header table while the client's first block, made for
    # the larger one, is on its way; the client's later blocks shrink it (a size update first).
    server.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 100})
    client.send_headers(1, head)
    client.send_data(1, body[:10], pad_length=7)
    client.send_data(1, body[10:], end_stream=True)
    flush(first='response')
    flush()
    # A client block between the server's two: each side's table must stay its own.
    server.send_headers(1, [(':status', '200'), ('content-type', 'text/event-stream')])
    flush()
    client.send_headers(3, head[:4] + [('x-request-id', 'req-3')], end_stream=True,
                        priority_weight=200, priority_depends_on=1)
    client.send_headers(5, head[:4] + [('x-request-id', 'req-5')], end_stream=True)
    flush()
    server.send_headers(3, [(':status', '200'), ('content-type', 'text/event-stream')])
    server.send_headers(5, [(':status', '200'), ('content-type', 'text/event-stream')])
    server.send_data(5, EVENTS[0].encode())
    flush()
    for i, ev in enumerate(EVENTS):
        # Split one event over two frames, and pad some.
        raw = ev.encode()
        if i == 2:
            server.send_data(1, raw[:5])
            server.send_data(1, raw[5:], pad_length=3)
        else:
            server.send_data(1, raw, pad_length=(i % 2) * 11)
        if i == 1:
            server.send_data(3, EVENTS[0].encode())
            server.reset_stream(3, error_code=8)
            # The client cancels stream 5 while the server's next event on it is on its way.
            server.send_data(5, EVENTS[1].encode())
            client.reset_stream(5, error_code=8)
        flush()
    server.send_headers(1, [('x-trailer', 'done')], end_stream=True)  # trailers end it
    flush()
    client.close_connection()
    flush()
    want = {
        1: dict(x_request_id='req-1', status=200, end='complete', events=[e[6:-2] for e in EVENTS],
                request_keys=['max_tokens', 'model', 'stream']),
        3: dict(x_request_id='req-3', status=200, end='upstream reset the stream (error 8)',
                events=[EVENTS[0][6:-2]], request_keys=None),
        5: dict(x_request_id='req-5', status=200, end='client reset the stream (error 8)',
                events=[EVENTS[0][6:-2]], request_keys=None),
    }
    return wire, want


def read(wire, cuts):
    """The tap's records of `wire`, each direction's bytes cut where `cuts(n)` says."""
    log = Log()
    conn = tap.H2Connection(log, 0)
    t = 0
    for side, data in wire:
        feed = conn.client_bytes if side == 'request' else conn.server_bytes
        for piece in cuts(data):
            t += 1
            feed(piece, t)
    conn.closed('client', t + 1)
    return log.records


def problems_in(records, want, how):
    out = []
    conns = [r for r in records if r['type'] == 'connection']
    if len(conns) != 1 or conns[0]['parse_error']:
        out.append(f'{how}: connection {conns}')
    got = {r['stream']: r for r in records if r['type'] == 'exchange'}
    if sorted(got) != sorted(want):
        return out + [f'{how}: streams {sorted(got)}']
    for sid, w in want.items():
        r = got[sid]
        events = [e['data'] for e in (r.get('sse') or {}).get('events_list', [])]
        keys = (r.get('request') or {}).get('keys')
        seen = dict(x_request_id=r['x_request_id'], status=r['status'], end=r['end'],
                    events=events, request_keys=keys)
        for k in w:
            if seen[k] != w[k]:
                out.append(f'{how}: stream {sid} {k} {seen[k]!r}, written {w[k]!r}')
    return out


def run():
    wire, want = conversation()
    total = sum(len(d) for _, d in wire)
    problems = problems_in(read(wire, lambda d: [d]), want, 'whole writes')
    # Each write cut in two: at every byte of its first KiB (every frame head but the header
    # block's is there), then every 61st byte.
    longest = max(len(d) for _, d in wire)
    cuts = list(range(1, 1024)) + list(range(1024, longest, 61))
    for at in cuts:
        problems += problems_in(read(wire, lambda d: [d[:at], d[at:]]), want, f'cut at {at}')
        if len(problems) > 8:
            break
    rng = random.Random(1)
    for trial in range(TRIALS):
        def pieces(d):
            out, i = [], 0
            while i < len(d):
                n = rng.randint(1, 300)
                out.append(d[i:i + n])
                i += n
            return out
        problems += problems_in(read(wire, pieces), want, f'random trial {trial}')
        if len(problems) > 8:
            break
    problems += not_http2()
    figure = (f'{len(wire)} writes, {total} bytes from h2\'s own client and server: '
              f'CONTINUATION, padding, an event over two frames, trailers, resets both ways with '
              f'a frame after one, a priority, a shrunk header table · read whole, cut in two at '
              f'{len(cuts)} places and in {TRIALS} random cuttings · an HTTP/1.1 answer refused')
    return not problems, figure, problems[:20]


def not_http2():
    """An HTTP/1.1 answer to a client's HTTP/2 preface is a parse error at once, not a frame
    the tap waits for."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    wire = [('request', client.data_to_send()),
            ('response', b'HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n')]
    conns = [r for r in read(wire, lambda d: [d]) if r['type'] == 'connection']
    error = conns[0]['parse_error'] if conns else None
    if not error or 'SETTINGS' not in error:
        return [f'an HTTP/1.1 answer: parse error {error!r}']
    return []
