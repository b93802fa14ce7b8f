"""HTTP/2 framing for tap.py (RFC 9113): a copy of each direction's bytes, cut into frames.

The tap forwards a client's HTTP/2 connection unchanged; this reads what went by. Header blocks
are decoded with the `hpack` package (python-hyper's HPACK, RFC 7541: an implementation
tokentrace shares nothing with), one decoder per direction, fed every block in order so that
its dynamic table stays the sender's. A handler gets what matters to an exchange:

    handler.headers(side, stream_id, [(name, value)], end_stream, t)
    handler.data(side, stream_id, payload, end_stream, t)
    handler.reset(side, stream_id, error_code, t)
    handler.goaway(side, last_stream_id, error_code, t)

`side` is 'request' (client to server) or 'response'; `t` is the time of the read that
completed the frame. Padding is taken off; PRIORITY, PING and WINDOW_UPDATE are passed over.
Each side must open with SETTINGS, and no frame may be larger than its receiver allows: bytes
that are not HTTP/2 are said so at once, not waited on as a frame.
"""
import hpack

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_MAX_FRAME_SIZE = 0x5
# What a frame may carry until its receiver's SETTINGS says more (RFC 9113, section 4.2).
DEFAULT_MAX_FRAME = 16384
# A header table and a header list are the sender's to size (its peer's SETTINGS bound them);
# hpack's own defaults (4 KiB, 64 KiB) would refuse legal ones.
TABLE_LIMIT = HEADER_LIST_LIMIT = 1 << 30
OTHER = {'request': 'response', 'response': 'request'}


class H2Error(Exception):
    pass


def unpad(flags, payload):
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise H2Error('padding longer than the frame')
    return payload[1:len(payload) - payload[0]]


class H2Frames:
    """Both directions of one connection; `feed(side, bytes, t)` as they are forwarded."""

    def __init__(self, handler):
        self.handler = handler
        self.buf = {'request': bytearray(), 'response': bytearray()}
        self.preface_seen = False
        self.decoder = {'request': hpack.Decoder(), 'response': hpack.Decoder()}
        for decoder in self.decoder.values():
            # The tap reads what a sender's table holds, by the size updates in its blocks;
            # holding the sender to its peer's SETTINGS is the peer's business, not a witness's.
            decoder.max_allowed_table_size = TABLE_LIMIT
            decoder.max_header_list_size = HEADER_LIST_LIMIT
        # Largest frame each side may send: what the other side's SETTINGS allows.
        self.max_frame = {'request': DEFAULT_MAX_FRAME, 'response': DEFAULT_MAX_FRAME}
        self.settings_seen = {'request': False, 'response': False}
        # A header block waiting for its CONTINUATION frames: (its frames' stream, the stream
        # the handler is told of or None, END_STREAM, the fragment so far).
        self.block = {'request': None, 'response': None}
        self.frames = 0

    def feed(self, side, data, t):
        buf = self.buf[side]
        buf += data
        if side == 'request' and not self.preface_seen:
            if not PREFACE.startswith(bytes(buf[:len(PREFACE)])):
                raise H2Error(f'no HTTP/2 preface: {bytes(buf[:24])!r}')
            if len(buf) < len(PREFACE):
                return
            del buf[:len(PREFACE)]
            self.preface_seen = True
        while len(buf) >= 9:
            length = int.from_bytes(buf[0:3], 'big')
            kind, flags = buf[3], buf[4]
            # Each side's preface ends with SETTINGS: anything else (an HTTP/1.1 answer read as
            # a frame head, say) is not HTTP/2, and is said so before its length is waited for.
            if not self.settings_seen[side]:
                if kind != SETTINGS or flags & ACK:
                    raise H2Error(f'{side} side does not open with SETTINGS: '
                                  f'{bytes(buf[:9])!r}')
                self.settings_seen[side] = True
            if length > self.max_frame[side]:
                raise H2Error(f'{length}-byte frame, over the {self.max_frame[side]} allowed')
            if len(buf) < 9 + length:
                return
            stream = int.from_bytes(buf[5:9], 'big') & 0x7fffffff
            payload = bytes(buf[9:9 + length])
            del buf[:9 + length]
            self.frames += 1
            self.frame(side, kind, flags, stream, payload, t)

    def frame(self, side, kind, flags, stream, payload, t):
        pending = self.block[side]
        if pending is not None and kind != CONTINUATION:
            raise H2Error(f'frame type {kind} inside a header block of stream {pending[0]}')
        if kind == DATA:
            self.handler.data(side, stream, unpad(flags, payload), bool(flags & END_STREAM), t)
        elif kind == HEADERS:
            fragment = unpad(flags, payload)
            if flags & PRIORITY_FLAG:
                fragment = fragment[5:]
            self.header_block(side, (stream, stream, bool(flags & END_STREAM), fragment), flags, t)
        elif kind == PUSH_PROMISE:
            # Decoded only to keep the table in step; a client that disables push never sees one.
            fragment = unpad(flags, payload)[4:]
            self.header_block(side, (stream, None, False, fragment), flags, t)
        elif kind == CONTINUATION:
            if pending is None or pending[0] != stream:
                raise H2Error(f'CONTINUATION of stream {stream} with no header block open')
            self.block[side] = None
            self.header_block(side, pending[:3] + (pending[3] + payload,), flags, t)
        elif kind == RST_STREAM:
            if len(payload) != 4:
                raise H2Error('RST_STREAM of the wrong length')
            self.handler.reset(side, stream, int.from_bytes(payload, 'big'), t)
        elif kind == SETTINGS:
            if not flags & ACK:
                self.settings(side, payload)
        elif kind == GOAWAY:
            if len(payload) < 8:
                raise H2Error('GOAWAY too short')
            last = int.from_bytes(payload[0:4], 'big') & 0x7fffffff
            self.handler.goaway(side, last, int.from_bytes(payload[4:8], 'big'), t)

    def header_block(self, side, block, flags, t):
        if not flags & END_HEADERS:
            self.block[side] = block
            return
        _, stream, end_stream, fragment = block
        try:
            headers = self.decoder[side].decode(fragment, raw=False)
        except hpack.HPACKError as e:
            raise H2Error(f'HPACK: {e}')
        if stream is not None:
            self.handler.headers(side, stream, [(n.lower(), v) for n, v in headers], end_stream, t)

    def settings(self, side, payload):
        """A side's SETTINGS_MAX_FRAME_SIZE: how large the other side's frames may be."""
        if len(payload) % 6:
            raise H2Error('SETTINGS of the wrong length')
        for i in range(0, len(payload), 6):
            if int.from_bytes(payload[i:i + 2], 'big') == SETTINGS_MAX_FRAME_SIZE:
                # Taken at once: the tap only needs a bound, and the sender may use it as soon
                # as it has read this.
                value = int.from_bytes(payload[i + 2:i + 6], 'big')
                self.max_frame[OTHER[side]] = max(self.max_frame[OTHER[side]], value)
