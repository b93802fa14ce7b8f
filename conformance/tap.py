#!/usr/bin/env python3
"""An independent witness between a client and an HTTP server.

    tap.py --listen PORT --upstream 127.0.0.1:PORT --log exchanges.jsonl
           [--tls-cert CERT.pem --tls-key KEY.pem] [--h2]

Forwards bytes both ways unchanged and as soon as they arrive, and parses a copy of them itself
(it shares no code with tokentrace): request heads and bodies, response heads, bodies framed by
chunked encoding, content-length or connection close, and server-sent events split on blank
lines. For every exchange it writes one JSON line with what went over the wire: status, SSE
data events, comment lines, events carrying output text, `[DONE]`, usage, llama.cpp
`timings`, and the monotonic time of the read that completed each event (CLOCK_MONOTONIC, the
clock tokentrace's traces use, so the two can be compared). One line per connection too, with
who closed it and how many exchanges it carried.

With --tls-cert and --tls-key it serves TLS to the client (Python's ssl module, that is
OpenSSL: a TLS stack tokentrace shares nothing with), still forwards plaintext upstream, and
logs the plaintext exchanges as above; closing a client connection sends close_notify.

With --h2 the connections carry HTTP/2 instead (prior knowledge upstream; over TLS, offered to
the client as h2 by ALPN): each stream is an exchange, its frames cut and its headers decoded by
tap_h2.py, and its events parsed and timed as above.

Standard library only, but for `hpack` (python-hyper's, installed with `h2`) under --h2;
ends on SIGTERM or SIGINT.
"""
import argparse
import asyncio
import codecs
import json
import signal
import ssl
import sys
import time

try:
    from tap_h2 import H2Error, H2Frames
except ImportError:  # no hpack: HTTP/1.1 only
    H2Error = H2Frames = None

# Response bodies that are not an event stream are kept up to this many bytes (error texts).
BODY_KEEP = 4096
# Comment lines kept verbatim per exchange (the rest are only counted).
COMMENTS_KEEP = 5
# A head larger than this is not HTTP we understand: the tap gives up parsing (still forwards).
HEAD_LIMIT = 1 << 20
# A server read the tap took longer than this to hand on to the client (its own scheduling on a
# busy host) is logged with the connection, so that the check does not count it as the client's.
FORWARD_LOG_NS = 1_000_000

now = time.monotonic_ns


class ParseError(Exception):
    pass


PARSE_ERRORS = (ParseError, H2Error) if H2Error else (ParseError,)


def parse_head(raw):
    """(start line fields, [(name lower-case, value)]) of a head without its blank line."""
    lines = raw.decode('latin-1').split('\r\n')
    start = lines[0].split(' ', 2)
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(':')
        if not sep:
            raise ParseError(f'header line without colon: {line[:80]!r}')
        headers.append((name.strip().lower(), value.strip()))
    return start, headers


def take_head(buf, side):
    """Removes a complete head (through its blank line) from `buf` and parses it; None while
    the head is still incomplete."""
    i = buf.find(b'\r\n\r\n')
    if i < 0:
        if len(buf) > HEAD_LIMIT:
            raise ParseError(f'{side} head too long')
        return None
    head = parse_head(bytes(buf[:i]))
    del buf[:i + 4]
    return head


def header(headers, name):
    for n, v in headers:
        if n == name:
            return v
    return None


class Body:
    """Incremental body decoder: content-length, chunked, or until close ('close')."""

    def __init__(self, framing, length=0):
        self.framing = framing
        self.left = length  # content-length bytes left, or bytes left in the current chunk
        self.state = 'size' if framing == 'chunked' else 'data'
        self.buf = bytearray()
        self.done = framing == 'length' and length == 0
        self.chunks = 0  # chunked-encoding chunks seen

    def feed(self, data):
        """Decoded bytes out of `data`, and the bytes that follow the body (the next message)."""
        if self.framing == 'close':
            return bytes(data), b''
        if self.framing == 'length':
            take = data[:self.left]
            self.left -= len(take)
            self.done = self.left == 0
            return bytes(take), bytes(data[len(take):])
        out = bytearray()
        self.buf += data
        while not self.done:
            if self.state == 'size':
                i = self.buf.find(b'\r\n')
                if i < 0:
                    break
                size_field = self.buf[:i].split(b';', 1)[0].strip()
                try:
                    self.left = int(size_field, 16)
                except ValueError:
                    raise ParseError(f'bad chunk size {bytes(size_field[:20])!r}')
                del self.buf[:i + 2]
                self.state = 'trailers' if self.left == 0 else 'data'
                if self.left:
                    self.chunks += 1
            elif self.state == 'data':
                take = self.buf[:self.left]
                out += take
                del self.buf[:len(take)]
                self.left -= len(take)
                if self.left:
                    break
                self.state = 'crlf'
            elif self.state == 'crlf':
                if len(self.buf) < 2:
                    break
                if self.buf[:2] != b'\r\n':
                    raise ParseError('chunk not followed by CRLF')
                del self.buf[:2]
                self.state = 'size'
            elif self.state == 'trailers':
                # Trailer lines end with an empty line; with no trailers that is the next CRLF.
                i = self.buf.find(b'\r\n')
                if i < 0:
                    break
                line = self.buf[:i]
                del self.buf[:i + 2]
                if not line:
                    self.done = True
        rest = bytes(self.buf) if self.done else b''
        if self.done:
            self.buf.clear()
        return bytes(out), rest


class Sse:
    """Server-sent events (WHATWG): lines end in CRLF, LF or CR; a blank line ends an event."""

    def __init__(self, api):
        self.api = api
        self.pending = ''
        self.cr = False  # last byte fed was a CR (its LF may come in the next read)
        self.data = None  # data lines of the event being built, or None
        self.event_name = None
        self.stats = dict(events=0, data_events=0, comment_lines=0, comments=[], content_events=0,
                          reasoning_events=0, role_events=0, usage_events=0, done_events=0,
                          timings_events=0, other_fields=[], finish_reasons=[], events_list=[],
                          first_content_ns=None, last_content_ns=None, not_json=0,
                          after_done_events=0)
        self.usage = None
        self.timings = None

    def feed(self, text, t):
        if self.cr and text.startswith('\n'):
            text = text[1:]
        self.cr = text.endswith('\r')
        buf = self.pending + text
        # Split on any line terminator; the last piece is an unterminated line (kept).
        lines = buf.replace('\r\n', '\n').replace('\r', '\n').split('\n')
        self.pending = lines.pop()
        for line in lines:
            self.line(line, t)

    def line(self, line, t):
        if line == '':
            if self.data is not None:
                self.dispatch('\n'.join(self.data), t)
            self.data, self.event_name = None, None
            return
        if line.startswith(':'):
            self.stats['comment_lines'] += 1
            if len(self.stats['comments']) < COMMENTS_KEEP:
                self.stats['comments'].append(line)
            return
        name, sep, value = line.partition(':')
        if sep and value.startswith(' '):
            value = value[1:]
        if name == 'data':
            self.data = (self.data or []) + [value]
        elif name == 'event':
            self.event_name = value
        elif name not in self.stats['other_fields']:
            self.stats['other_fields'].append(name)

    def dispatch(self, data, t):
        s = self.stats
        s['events'] += 1
        s['data_events'] += 1
        if s['done_events']:
            s['after_done_events'] += 1
        ev = dict(t=t, data=data)
        if self.event_name:
            ev['event'] = self.event_name
        s['events_list'].append(ev)
        if data.strip() == '[DONE]':
            s['done_events'] += 1
            return
        try:
            obj = json.loads(data)
        except ValueError:
            s['not_json'] += 1
            return
        if not isinstance(obj, dict):
            return
        text = reasoning = False
        for choice in obj.get('choices') or []:
            if self.api == 'chat':
                delta = choice.get('delta') or {}
                if delta.get('content'):
                    text = True
                if delta.get('reasoning_content') or delta.get('reasoning'):
                    reasoning = True
                if delta.get('role'):
                    s['role_events'] += 1
            elif choice.get('text'):
                text = True
            if choice.get('finish_reason'):
                s['finish_reasons'].append(choice['finish_reason'])
        if text:
            s['content_events'] += 1
            s['first_content_ns'] = s['first_content_ns'] or t
            s['last_content_ns'] = t
        if reasoning:
            s['reasoning_events'] += 1
        if obj.get('usage'):
            s['usage_events'] += 1
            self.usage = obj['usage']
        if 'timings' in obj:
            s['timings_events'] += 1
            self.timings = obj['timings']

    def summary(self):
        out = dict(self.stats)
        out['usage'] = self.usage
        out['timings'] = self.timings
        out['unterminated'] = bool(self.pending) or self.data is not None
        return out


class Exchange:
    def __init__(self, conn, index, start, headers, t):
        self.rec = dict(type='exchange', conn=conn, index_on_conn=index, method=start[0],
                        path=start[1] if len(start) > 1 else '', version=start[2] if len(start) > 2 else '',
                        x_request_id=header(headers, 'x-request-id'),
                        request_headers=[n for n, _ in headers],
                        # Values of the headers that carry request ids (whatever their name).
                        id_headers={n: v for n, v in headers
                                    if 'request-id' in n or 'correlation' in n},
                        connection=header(headers, 'connection'),
                        t_request_head=t, t_request_end=None, request=None,
                        status=None, response_headers=None, framing=None, body_bytes=0,
                        t_response_head=None, t_response_end=None, end=None)
        self.body = bytearray()
        path = self.rec['path']
        self.api = 'chat' if 'chat/completions' in path else 'completions'

    def request_done(self, t):
        self.rec['t_request_end'] = t
        try:
            body = json.loads(self.body or b'null')
        except ValueError:
            body = None
        if isinstance(body, dict):
            keys = ('model', 'max_tokens', 'max_completion_tokens', 'stream', 'stream_options',
                    'temperature', 'ignore_eos')
            self.rec['request'] = {k: body[k] for k in keys if k in body}
            self.rec['request']['keys'] = sorted(body)
        self.body = bytearray()


class Connection:
    """One client connection and its upstream connection; requests pair with responses in order."""

    def __init__(self, tap, cid):
        self.tap, self.cid = tap, cid
        self.req_buf = bytearray()
        self.req_body = None
        self.req_cur = None
        self.waiting = []  # exchanges whose request is sent and whose response has not ended
        self.resp_buf = bytearray()
        self.resp_cur = None  # (exchange, Body, Sse or None, kept body)
        self.count = 0
        self.last_response_end = None
        self.broken = None  # parse error: keep forwarding, stop parsing
        # [read time, time the write to the client returned] of server reads handed on late.
        self.forward_delays = []

    # ---- client -> server
    def client_bytes(self, data, t):
        self._parse(self._client_bytes, data, t, 'request')

    def _client_bytes(self, data, t):
        self.req_buf += data
        while self.req_buf:
            if self.req_body is None:
                head = take_head(self.req_buf, 'request')
                if head is None:
                    return
                start, headers = head
                ex = Exchange(self.cid, self.count, start, headers, t)
                ex.rec['idle_before_ns'] = (t - self.last_response_end
                                            if self.last_response_end is not None else None)
                self.count += 1
                te = (header(headers, 'transfer-encoding') or '').lower()
                cl = header(headers, 'content-length')
                if 'chunked' in te:
                    self.req_body = Body('chunked')
                else:
                    self.req_body = Body('length', int(cl or 0))
                self.req_cur = ex
                self.waiting.append(ex)
            body, rest = self.req_body.feed(bytes(self.req_buf))
            self.req_buf = bytearray(rest)
            self.req_cur.body += body
            if not self.req_body.done:
                return
            self.req_cur.request_done(t)
            self.req_body = None
            self.req_cur = None

    # ---- server -> client
    def server_bytes(self, data, t):
        self._parse(self._server_bytes, data, t, 'response')

    def _parse(self, parse, data, t, side):
        """Parse a copy of forwarded bytes; the first parse error stops parsing (bytes are
        still forwarded) and is reported with the connection."""
        if self.broken:
            return
        try:
            parse(data, t)
        except PARSE_ERRORS as e:
            self.broken = f'{side}: {e}'

    def _server_bytes(self, data, t):
        self.resp_buf += data
        while self.resp_buf:
            if self.resp_cur is None:
                head = take_head(self.resp_buf, 'response')
                if head is None:
                    return
                start, headers = head
                status = int(start[1]) if len(start) > 1 and start[1].isdigit() else None
                if status is not None and 100 <= status < 200:
                    continue  # 100 Continue and friends: the real response follows
                if not self.waiting:
                    raise ParseError('response without a request')
                ex = self.waiting[0]
                rec = ex.rec
                rec.update(status=status, response_headers=headers, t_response_head=t)
                te = (header(headers, 'transfer-encoding') or '').lower()
                cl = header(headers, 'content-length')
                if rec['method'] == 'HEAD' or status in (204, 304):
                    body = Body('length', 0)
                elif 'chunked' in te:
                    body = Body('chunked')
                elif cl is not None:
                    body = Body('length', int(cl))
                else:
                    body = Body('close')
                rec['framing'] = body.framing
                ctype = (header(headers, 'content-type') or '').lower()
                sse = Sse(ex.api) if 'text/event-stream' in ctype else None
                self.resp_cur = [ex, body, sse, bytearray()]
                if body.done:
                    self.response_done(t, 'complete')
                continue
            ex, body, sse, kept = self.resp_cur
            decoded, rest = body.feed(bytes(self.resp_buf))
            self.resp_buf = bytearray(rest)
            ex.rec['body_bytes'] += len(decoded)
            if sse is not None:
                sse.feed(decoded.decode('utf-8', 'replace'), t)
            elif len(kept) < BODY_KEEP:
                kept += decoded[:BODY_KEEP - len(kept)]
            if body.done:
                self.response_done(t, 'complete')
            else:
                return

    def response_done(self, t, how):
        ex, body, sse, kept = self.resp_cur
        self.resp_cur = None
        if body.framing == 'chunked':
            ex.rec['http_chunks'] = body.chunks
        self.log_exchange(ex, sse, kept, t, how)

    def log_exchange(self, ex, sse, kept, t, how):
        """Writes exchange `ex`, ended at `t` as `how`: with its events or the body kept when a
        response head came, with neither when none did."""
        self.waiting.remove(ex)
        rec = ex.rec
        rec['t_response_end'] = t
        rec['end'] = how
        if rec['t_response_head'] is not None:
            if sse is not None:
                rec['sse'] = sse.summary()
            else:
                rec['body'] = kept.decode('utf-8', 'replace')
            self.last_response_end = t
        self.tap.write(rec)

    def closed(self, by, t):
        """The connection ended (`by` upstream or client): flush what is in flight."""
        if self.resp_cur is not None:
            ex, body = self.resp_cur[0], self.resp_cur[1]
            if body.framing == 'close' and by == 'upstream':
                self.response_done(t, 'complete')
            else:
                self.response_done(t, f'{by} closed mid-response')
        for ex in list(self.waiting):
            # Requests that never got a response head: what a client sees as a reset/EOF.
            self.log_exchange(ex, None, None, t, f'{by} closed before response')
        self.log_connection(by, t)

    def log_connection(self, by, t, **more):
        """Writes the connection's own line, with `more` fields of its protocol's."""
        idle = t - self.last_response_end if self.last_response_end is not None else None
        self.tap.write(dict(type='connection', conn=self.cid, exchanges=self.count,
                            closed_by=by, t_close=t, idle_at_close_ns=idle,
                            parse_error=self.broken, forward_delays=self.forward_delays, **more))


class H2Connection(Connection):
    """One client connection carrying HTTP/2: each stream is an exchange (RFC 9113), in the
    order the client opened them. tap_h2.H2Frames cuts the frames and calls the methods below."""

    def __init__(self, tap, cid):
        super().__init__(tap, cid)
        self.frames = H2Frames(self)
        self.streams = {}  # stream id -> [exchange, Sse or None, kept body, UTF-8 decoder]
        # Streams logged already: frames still in flight on them (after a reset, or a request
        # body still coming after the response ended) are counted, not read.
        self.ended = set()
        self.late_frames = 0
        self.goaways = []

    def client_bytes(self, data, t):
        self._parse(lambda d, t: self.frames.feed('request', d, t), data, t, 'request')

    def server_bytes(self, data, t):
        self._parse(lambda d, t: self.frames.feed('response', d, t), data, t, 'response')

    def headers(self, side, sid, headers, end_stream, t):
        if sid in self.ended:
            self.late_frames += 1
            return
        st = self.streams.get(sid)
        if side == 'request':
            if st is None:
                pseudo = {n: v for n, v in headers if n.startswith(':')}
                start = [pseudo.get(':method', ''), pseudo.get(':path', ''), 'HTTP/2']
                ex = Exchange(self.cid, self.count, start, headers, t)
                ex.rec['stream'] = sid
                ex.rec['idle_before_ns'] = (t - self.last_response_end
                                            if self.last_response_end is not None else None)
                self.count += 1
                st = self.streams[sid] = [ex, None, bytearray(), None]
                self.waiting.append(ex)
            if end_stream:  # with the head, or as the request's trailers
                st[0].request_done(t)
            return
        if st is None:
            raise H2Error(f'response headers on stream {sid}, which no request opened')
        rec = st[0].rec
        if rec['t_response_head'] is None:
            status = dict(headers).get(':status', '')
            status = int(status) if status.isdigit() else None
            if status is not None and 100 <= status < 200:
                return  # 100 Continue and friends: the real response follows
            plain = [(n, v) for n, v in headers if not n.startswith(':')]
            rec.update(status=status, response_headers=plain, t_response_head=t, framing='h2')
            if 'text/event-stream' in (header(plain, 'content-type') or '').lower():
                st[1] = Sse(st[0].api)
                st[3] = codecs.getincrementaldecoder('utf-8')('replace')
        if end_stream:
            self.stream_done(sid, t, 'complete')

    def data(self, side, sid, payload, end_stream, t):
        if sid in self.ended:
            self.late_frames += 1
            return
        st = self.streams.get(sid)
        if st is None:
            raise H2Error(f'DATA on stream {sid}, which no request opened')
        ex, sse, kept, utf8 = st
        if side == 'request':
            ex.body += payload
            if end_stream:
                ex.request_done(t)
            return
        if ex.rec['t_response_head'] is None:
            raise H2Error(f'DATA on stream {sid} before its response headers')
        ex.rec['body_bytes'] += len(payload)
        if sse is not None:
            sse.feed(utf8.decode(payload), t)
        elif len(kept) < BODY_KEEP:
            kept += payload[:BODY_KEEP - len(kept)]
        if end_stream:
            self.stream_done(sid, t, 'complete')

    def reset(self, side, sid, code, t):
        if sid in self.streams:
            who = 'client' if side == 'request' else 'upstream'
            self.stream_done(sid, t, f'{who} reset the stream (error {code})')

    def goaway(self, side, last, code, t):
        self.goaways.append(dict(by='client' if side == 'request' else 'upstream',
                                 last_stream=last, error=code, t=t))

    def stream_done(self, sid, t, how):
        ex, sse, kept, _ = self.streams.pop(sid)
        self.ended.add(sid)
        self.log_exchange(ex, sse, kept, t, how)

    def closed(self, by, t):
        for sid, (ex, *_) in list(self.streams.items()):
            cut = 'mid-response' if ex.rec['t_response_head'] is not None else 'before response'
            self.stream_done(sid, t, f'{by} closed {cut}')
        self.log_connection(by, t, protocol='h2', frames=self.frames.frames,
                            frames_after_stream_end=self.late_frames, goaways=self.goaways)


class Tap:
    def __init__(self, upstream, log, h2=False):
        self.connection = H2Connection if h2 else Connection
        self.host, port = upstream.rsplit(':', 1)
        self.port = int(port)
        self.log = open(log, 'a', buffering=1)
        self.next_conn = 0

    def write(self, rec):
        self.log.write(json.dumps(rec, separators=(',', ':')) + '\n')

    async def handle(self, c_reader, c_writer):
        cid = self.next_conn
        self.next_conn += 1
        conn = self.connection(self, cid)
        tls = c_writer.get_extra_info('ssl_object')
        self.write(dict(type='accept', conn=cid, t=now(),
                        alpn=tls.selected_alpn_protocol() if tls else None))
        try:
            u_reader, u_writer = await asyncio.open_connection(self.host, self.port)
        except OSError as e:
            self.write(dict(type='connection', conn=cid, exchanges=0, closed_by='tap',
                            error=f'upstream connect: {e}', t_close=now()))
            c_writer.close()
            return
        closer = []  # who closed first

        async def pump(reader, writer, feed, side):
            try:
                while True:
                    data = await reader.read(65536)
                    t = now()
                    if not data:
                        break
                    writer.write(data)
                    if side == 'upstream':
                        sent = now()
                        if sent - t > FORWARD_LOG_NS:
                            conn.forward_delays.append([t, sent])
                    await writer.drain()
                    feed(data, t)
            except (ConnectionError, OSError):
                pass
            closer.append((side, now()))
            if side == 'client' and conn.waiting and writer.can_write_eof():
                # The client half-closed with a response still due: let the server finish it.
                writer.write_eof()
            else:
                writer.close()

        await asyncio.gather(pump(c_reader, u_writer, conn.client_bytes, 'client'),
                             pump(u_reader, c_writer, conn.server_bytes, 'upstream'))
        by, t = closer[0]
        conn.closed(by, t)
        for w in (c_writer, u_writer):
            w.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--listen', type=int, required=True, help='port on 127.0.0.1 (0: any)')
    ap.add_argument('--upstream', required=True, help='host:port of the server')
    ap.add_argument('--log', required=True, help='JSON lines file (appended)')
    ap.add_argument('--tls-cert', help='serve TLS with this certificate (PEM)')
    ap.add_argument('--tls-key', help="the certificate's private key (PEM)")
    ap.add_argument('--h2', action='store_true',
                    help='the connections carry HTTP/2 (TLS offers h2 by ALPN)')
    args = ap.parse_args()
    if args.h2 and H2Frames is None:
        ap.error('--h2 needs the hpack package')
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            ap.error('--tls-cert and --tls-key go together')
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
        if args.h2:
            tls.set_alpn_protocols(['h2'])
    tap = Tap(args.upstream, args.log, args.h2)
    server = await asyncio.start_server(tap.handle, '127.0.0.1', args.listen, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    scheme = 'https' if tls else 'http'
    print(f'tap listening on 127.0.0.1:{port} ({scheme}) -> {args.upstream}', flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    tap.log.close()


if __name__ == '__main__':
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
