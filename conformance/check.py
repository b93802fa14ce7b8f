#!/usr/bin/env python3
"""Checks of one conformance step; each appends result rows to a JSON-lines results file.

    check.py --results R stream    --bin B --engine E --api A --trace T --tap TAP.jsonl --expect N
                                   [--timings]
    check.py --results R aiperf    --bin B --engine E --export DIR --trace T --import-rc N
    check.py --results R keepalive --engine E --trace T --kind stale|idle --expect N
    check.py --results R fail      --engine E --api A --check C --figure TEXT
    check.py --results R table     # prints engine x API x check, exits 1 if a row failed

Traces are read with the reference reader (format/reference/read_trace.py), not with
tokentrace, and compared with what the tap (tap.py) saw on the wire and with what the engine
itself reports. Needs zstandard and xxhash (the suite's venv-check).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'format', 'reference'))
from read_trace import CHANNELS, OUTCOMES, read_trace  # noqa: E402

CONTENT = CHANNELS.index('content')
DONE = CHANNELS.index('done')
MEASURED = 1

# Client-observed decode time (last content chunk - first content chunk) against llama-server's
# own timings.predicted_ms: allowed disagreement max(DECODE_TOL_MS, DECODE_TOL_PCT % of it).
# Both measure the same n-1 token intervals (predicted_ms runs from the first sampled token to
# the last); what separates them is when each token's chunk leaves the server and the loopback
# hop. Measured on a 2-core host, 119 requests of 48 tokens (1.1-8.9 s of decode) in three
# runs: median +0.01 ms, 74 % within 0.5 ms, p90 3.4 ms, worst 10.7 ms (0.09 %), worst relative
# 0.46 %; and -17.8 ms (0.23 %) while parallel compiles saturated the CPU. 1 % stays below one
# token interval, so a chunk counted in the wrong place still fails.
DECODE_TOL_MS = 5.0
DECODE_TOL_PCT = 1.0
# A CI run on a shared host once saw -29.7 ms (2.5 %) on one request of 24, which the tap's wire
# times showed too: llama-server's HTTP thread wrote the first chunk late. Beyond the tolerance,
# the part of the difference between the trace's span and the wire's span is ours; it must stay
# below the tap's own timing noise (arrival-lag max is ~3 ms on a busy host). The wire's span for
# this is taken where the tap handed the span's ends on: a CI run once saw the tap hand one
# event on 17 ms after reading it (the trace's kernel time of that event came 0.4 ms before the
# tap's read of the next), which is the tap's delay, not the client's.
DECODE_OURS_TOL_MS = 5.0

# The trace's arrival of an event is the kernel timestamp of the read that completed it; the tap
# read the same bytes from the server before forwarding them, so the trace's time must not be
# earlier than the tap's. Slack for the realtime->monotonic move of kernel timestamps.
ARRIVAL_SLACK_MS = 0.1

# AIPerf reproduction tolerances, as in tests/import_aiperf_reproduce.rs.
AIPERF_METRICS = ['time_to_first_token', 'time_to_second_token', 'request_latency',
                  'inter_token_latency', 'output_token_throughput_per_user',
                  'output_sequence_length']
AIPERF_REL = 1e-9
AIPERF_THROUGHPUTS = ['request_throughput', 'output_token_throughput']
AIPERF_THROUGHPUT_REL = 1e-6


class Results:
    def __init__(self, path, engine, api):
        self.path, self.engine, self.api = path, engine, api

    def row(self, check, ok, figure, detail=None):
        """ok: True (PASS), False (FAIL) or None (INFO: a fact, not a verdict)."""
        status = 'INFO' if ok is None else 'PASS' if ok else 'FAIL'
        rec = dict(engine=self.engine, api=self.api, check=check, status=status, figure=figure)
        if detail:
            rec['detail'] = detail
        with open(self.path, 'a') as f:
            f.write(json.dumps(rec) + '\n')
        print(f'  {status:4} {check:14} {figure}')
        for line in (detail or [])[:8]:
            print(f'         {line}')


def ms(ns):
    return ns / 1e6


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float('nan')


def content_chunks(req):
    return [c for c in req['chunks'] if c['channel'] == CONTENT and c['text_len'] > 0]


def analyze(binary, trace, protocol, fmt):
    out = subprocess.run([binary, 'analyze', trace, '--protocol', protocol, '--format', fmt],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    if fmt == 'jsonl':
        return [json.loads(line) for line in out.splitlines() if line.strip()]
    return json.loads(out)


def load_tap(path):
    exchanges, conns = [], []
    for line in open(path):
        rec = json.loads(line)
        if rec['type'] == 'exchange':
            exchanges.append(rec)
        elif rec['type'] == 'connection':
            conns.append(rec)
    return exchanges, conns


def id_form(value):
    if value is None:
        return 'absent'
    if value.isdigit():
        return 'integer'
    try:
        uuid.UUID(value)
        return 'uuid'
    except ValueError:
        return 'other'


def expected_request_id(trace, rid):
    """(header name, value) the recorder should have sent as the id of trace request `rid`.

    Format 1.1 manifests name the header and a per-run prefix: the value is a version-4-shaped
    UUID whose top 64 bits hold the prefix's 60 bits around the version nibble and whose low 64
    bits are variant 10 then the id's low 62 bits; no `request_id_header` means no id was sent
    (`--request-id-header none`). Format 1.0 recorders sent the decimal id as X-Request-ID.
    """
    spec = trace['manifest'].get('request_id_header')
    if spec is None:
        return 'x-request-id', (str(rid) if trace['header']['minor'] == 0 else None)
    prefix = spec['run_prefix'] & ((1 << 60) - 1)
    high = ((prefix >> 12) << 16) | (0x4 << 12) | (prefix & 0xfff)
    low = (0b10 << 62) | (rid & ((1 << 62) - 1))
    return spec['name'], str(uuid.UUID(int=(high << 64) | low))


def not_ok_detail(reqs):
    out = []
    for r in reqs:
        if r['outcome'] != 0:
            out.append(f"id {r['id']}: {OUTCOMES[r['outcome']]} status {r['status']}: "
                       f"{(r['error'] or '')[:160]}")
    return out


# ---------------------------------------------------------------- stream: trace vs tap
def cmd_stream(a, res):
    trace = read_trace(a.trace)
    measured = [r for r in trace['requests'] if r['phase'] == MEASURED]
    exchanges, conns = load_tap(a.tap)
    streams = [e for e in exchanges if e['path'].endswith('/completions')]

    # 1. Every measured request ok.
    bad = not_ok_detail(measured)
    n_ok = len(measured) - len(bad)
    resent = sum(1 for r in measured if r['retries'])
    # How many the stream reader sent itself on the heels of the response before them (a
    # closed loop over the own client on plain HTTP); the checks below hold for them as for
    # the requests their tasks sent.
    health = (trace['run_end'] or {}).get('client_health', {})
    chained = health.get('reader_sent_requests', 'no count of')
    # How many events the stream's template took whole, without the parser's search for the
    # line's end; the payload match below holds for them as for the others.
    whole = health.get('events_read_whole', 'no count of')
    res.row('requests-ok', bool(measured) and not bad and len(measured) == a.expect,
            f'{n_ok}/{len(measured)} ok (planned {a.expect}) · {resent} resent after a stale '
            f'keep-alive connection · {chained} sent by the stream reader · {whole} events '
            f'read whole', bad)

    # 2. Match trace requests with tap exchanges by the exact sequence of event payloads
    #    (every engine puts a unique completion id in each event), independent of how the
    #    request id is spelled. Exchanges left over are the recorder's calibration probes.
    by_payloads = {}
    for e in streams:
        key = tuple(ev['data'] for ev in (e.get('sse') or {}).get('events_list', []))
        by_payloads.setdefault(key, []).append(e)
    by_id = {}
    for e in streams:
        for value in (e.get('id_headers') or {}).values():
            by_id.setdefault(value, []).append(e)
    pairs, unmatched = [], []
    for r in measured:
        key = tuple(c['text'] for c in r['chunks'])
        cands = by_payloads.get(key) or []
        if len(cands) == 1 and r['chunks']:
            pairs.append((r, cands[0]))
            continue
        why = f"id {r['id']}: {len(r['chunks'])} chunks, {len(cands)} tap exchanges with the " \
              f"same payloads"
        # Say where the stream differs from the exchange that carried this request's id.
        _, sent = expected_request_id(trace, r['id'])
        same_id = [e for e in by_id.get(sent, []) if e.get('sse')]
        if same_id:
            wire = [ev['data'] for ev in same_id[-1]['sse']['events_list']]
            k = next((i for i, (x, y) in enumerate(zip(key, wire)) if x != y), min(len(key), len(wire)))
            why += f"; the exchange with its id has {len(wire)} events, first difference at {k}"
        unmatched.append(why)
    used = {id(e) for _, e in pairs}
    others = [e for e in streams if id(e) not in used]
    # Attempts the server cut before any response byte: what the recorder resends.
    cut = [e for e in others if e['status'] is None]
    forms = sorted({id_form(e['x_request_id']) for _, e in pairs})
    sent_ids = [e['x_request_id'] for _, e in pairs]
    dup = len(sent_ids) - len(set(sent_ids))
    if dup:
        unmatched.append(f'{dup} x-request-id values sent twice')
    # The id on the wire is the one the manifest says the recorder derived for that request.
    for r, e in pairs:
        name, want = expected_request_id(trace, r['id'])
        got = e.get('id_headers', {}).get(name.lower())
        if got != want:
            unmatched.append(f"id {r['id']}: sent {name} {got!r}, manifest derives {want!r}")
    res.row('tap-match', bool(pairs) and not unmatched,
            f'{len(pairs)}/{len(measured)} payload-identical · x-request-id {"/".join(forms)} · '
            f'{len(others) - len(cut)} other exchanges (probes) · {len(cut)} cut before a '
            f'response', unmatched)
    if not pairs:
        return

    # 2b. The HTTP version: what the wire carried, and what the trace says the recorder got.
    want = 'HTTP/2' if a.http2 else 'HTTP/1.1'
    wrong = [f"id {r['id']}: {e['version']} on the wire" for r, e in pairs if e['version'] != want]
    answered = sum(1 for r in trace['requests'] if r['status'])
    h2 = health.get('http2_responses')
    if h2 != (answered if a.http2 else 0):
        wrong.append(f'trace: {h2} responses over HTTP/2 of {answered} answered')
    fig = (f'{len(pairs)}/{len(measured)} streams {want} on the wire · trace: {h2} of '
           f'{answered} responses over HTTP/2')
    res.row('http-version', not wrong, fig if not wrong else f'{len(wrong)} problems', wrong)

    # 3. Content chunks per request: the trace's classification against the tap's own.
    diff = []
    tot_trace = tot_tap = 0
    for r, e in pairs:
        nt, ne = len(content_chunks(r)), e['sse']['content_events']
        tot_trace += nt
        tot_tap += ne
        if nt != ne:
            diff.append(f"id {r['id']}: trace {nt} content chunks, tap {ne}")
        has_done = any(c['channel'] == DONE for c in r['chunks'])
        if has_done != bool(e['sse']['done_events']):
            diff.append(f"id {r['id']}: [DONE] trace {has_done}, tap {e['sse']['done_events']}")
    res.row('content-chunks', not diff, f'trace {tot_trace} = tap {tot_tap} '
            f'({tot_tap / len(pairs):.1f}/req)' if not diff else f'{len(diff)} differences', diff)

    # 4. Usage: captured wherever the server sent it, with the server's numbers.
    diff, sent = [], 0
    for r, e in pairs:
        u = e['sse']['usage']
        if u:
            sent += 1
            want = (u.get('prompt_tokens'), u.get('completion_tokens'))
            got = (r['usage']['prompt_tokens'], r['usage']['completion_tokens'])
            if want != got:
                diff.append(f"id {r['id']}: server prompt/completion {want}, trace {got}")
            cached = (u.get('prompt_tokens_details') or {}).get('cached_tokens')
            if cached is not None and cached != r['usage']['cached_tokens']:
                diff.append(f"id {r['id']}: server cached_tokens {cached}, trace "
                            f"{r['usage']['cached_tokens']}")
        elif r['usage']['completion_tokens'] is not None:
            diff.append(f"id {r['id']}: trace has usage the server never sent")
    comp = sorted({r['usage']['completion_tokens'] for r, _ in pairs})
    res.row('usage', not diff, f'{sent}/{len(pairs)} streams had usage, trace agrees '
            f'(completion_tokens {comp[0]}..{comp[-1]})' if sent and not diff else
            f'{sent}/{len(pairs)} streams had usage' + ('' if not diff else ', trace differs'),
            diff)

    # 5. TTFT and ITL in tokentrace's analysis, and equal to what the reader derives itself.
    rows = {x['id']: x for x in analyze(a.bin, a.trace, 'tokentrace-v1', 'jsonl')}
    report = analyze(a.bin, a.trace, 'tokentrace-v1', 'json')
    diff = []
    for r, _ in pairs:
        x = rows.get(r['id'])
        cc = content_chunks(r)
        if x is None or x.get('ttft_ms') is None or x.get('itl_ms') is None:
            diff.append(f"id {r['id']}: analyze gives ttft {x and x.get('ttft_ms')}, "
                        f"itl {x and x.get('itl_ms')}")
            continue
        ttft = ms(cc[0]['arrival'] - r['send'])
        if abs(x['ttft_content_ms'] - ttft) > 1e-6:
            diff.append(f"id {r['id']}: ttft_content_ms {x['ttft_content_ms']}, reader {ttft}")
        if len(cc) > 1:
            itl = ms(cc[-1]['arrival'] - cc[0]['arrival']) / (len(cc) - 1)
            if abs(x['itl_request_mean_ms'] - itl) > 1e-6:
                diff.append(f"id {r['id']}: itl_request_mean_ms {x['itl_request_mean_ms']}, "
                            f"reader {itl}")
    m = report['metrics']
    for name in ('ttft_ms', 'itl_ms'):
        if m.get(name, {}).get('samples', 0) == 0:
            diff.append(f'report has no {name} samples')
    fig = (f"TTFT p50 {m['ttft_ms']['p50']:.1f} ms · ITL p50 {m['itl_ms']['p50']:.2f} ms · "
           f"per-request values = reader's" if not diff else f'{len(diff)} problems')
    res.row('ttft-itl', not diff, fig, diff)

    # 6. Arrival times: never before the tap forwarded the bytes; the gap is the hop.
    lags, early = [], []
    for r, e in pairs:
        for c, ev in zip(r['chunks'], e['sse']['events_list']):
            lag = ms(c['arrival'] + trace['header']['anchor_mono_ns'] - ev['t'])
            lags.append(lag)
            if lag < -ARRIVAL_SLACK_MS:
                early.append(f"id {r['id']}: chunk {lag:.3f} ms before the tap read it")
    res.row('arrival-lag', not early, f'trace - tap p50 {pct(lags, .5):.3f} ms, '
            f'p99 {pct(lags, .99):.3f}, min {min(lags):.3f}, max {max(lags):.3f}', early[:8])

    # 7. What the engine sent (facts for docs/ENGINES.md).
    first = pairs[0][1]['sse']
    shape = [f"{first['data_events']} events", f"role {first['role_events']}",
             f"usage events {first['usage_events']}", f"[DONE] {first['done_events']}",
             f"comments {sum(e['sse']['comment_lines'] for _, e in pairs)}",
             f"timings {'yes' if first['timings'] else 'no'}",
             f"reasoning {sum(e['sse']['reasoning_events'] for _, e in pairs)}"]
    reuse = max((c['exchanges'] for c in conns), default=0)
    # A server closing right after a response, although it did not say `Connection: close`,
    # is what makes a client's next request on that connection fail.
    quick = sum(1 for c in conns if c['closed_by'] == 'upstream' and c['idle_at_close_ns']
                is not None and c['idle_at_close_ns'] < 50e6)
    res.row('wire-shape', None, ', '.join(shape) + f' · {len(conns)} conns, max {reuse} '
            f'exchanges/conn, {quick} closed by the server < 50 ms after a response')

    # 8. llama-server: client-observed decode time against the engine's timings.predicted_ms.
    # A disagreement splits into our share (trace span - tap span: the same bytes, timed by us
    # and by the tap, the tap's span taken where it handed the ends on) and the server's (tap
    # span - predicted_ms: when its HTTP thread wrote the chunks against when it sampled the
    # tokens). Only ours can fail the row; a server that wrote its first chunk late on a busy
    # host, or a tap that handed an end on late, is reported, with the wire as the witness.
    if a.timings:
        rowsd, bad, worst, server_side = [], [], (0.0, 0.0, None), []
        # Server reads the tap handed on late: read time -> when its write returned.
        forwarded = {read: sent for c in conns for read, sent in c.get('forward_delays', [])}
        for r, e in pairs:
            t = e['sse']['timings']
            idx = [i for i, c in enumerate(r['chunks'])
                   if c['channel'] == CONTENT and c['text_len'] > 0]
            if not t or len(idx) < 2:
                bad.append(f"id {r['id']}: no timings or fewer than 2 content chunks")
                continue
            ev = e['sse']['events_list']
            client = ms(r['chunks'][idx[-1]]['arrival'] - r['chunks'][idx[0]]['arrival'])
            wire = ms(ev[idx[-1]]['t'] - ev[idx[0]]['t'])
            handed = ms(forwarded.get(ev[idx[-1]]['t'], ev[idx[-1]]['t'])
                        - forwarded.get(ev[idx[0]]['t'], ev[idx[0]]['t']))
            server = t['predicted_ms']
            d = client - server
            tol = max(DECODE_TOL_MS, DECODE_TOL_PCT / 100 * server)
            rowsd.append(d)
            if abs(d) > abs(worst[0]):
                worst = (d, 100 * d / server if server else 0.0, r['id'])
            if abs(d) <= tol:
                continue
            ours, theirs, taps = client - handed, wire - server, handed - wire
            line = (f"id {r['id']}: client {client:.2f} ms, wire {wire:.2f}, predicted_ms "
                    f"{server:.2f} (n {t.get('predicted_n')}, chunks {len(idx)}): ours "
                    f"{ours:+.2f}, server's {theirs:+.2f}, tap's {taps:+.2f}, tol {tol:.2f}")
            if abs(ours) > DECODE_OURS_TOL_MS:
                bad.append(line)
            else:
                server_side.append(line)
        median = statistics.median(rowsd) if rowsd else 0.0
        if rowsd and abs(median) > DECODE_TOL_MS:
            bad.append(f'median disagreement {median:+.2f} ms > {DECODE_TOL_MS:g} ms')
        if rowsd:
            fig = (f'worst {worst[0]:+.2f} ms ({worst[1]:+.2f} %, id {worst[2]}), median '
                   f'{median:+.2f} ms · tol max({DECODE_TOL_MS:g} ms, {DECODE_TOL_PCT:g} %) · '
                   f'{len(server_side)} beyond it on the server\'s or the tap\'s side of the wire')
        else:
            fig = 'no request with timings'
        res.row('decode-vs-srv', bool(rowsd) and not bad, fig, bad + server_side)


# ---------------------------------------------------------------- aiperf: import reproduces
def cmd_aiperf(a, res):
    theirs = json.load(open(os.path.join(a.export, 'profile_export_aiperf.json')))
    raw = os.path.join(a.export, 'profile_export_raw.jsonl')
    lines = [json.loads(line) for line in open(raw) if line.strip()]
    comments = sum(1 for rec in lines for resp in rec.get('responses') or []
                   for p in resp.get('packets') or [] if p.get('name') == 'comment')
    failed = [rec for rec in lines if rec.get('error') or (rec.get('status') or 200) >= 400]
    kinds = sorted({(rec.get('error') or {}).get('type') or f"HTTP {rec.get('status')}"
                    for rec in failed})
    # AIPerf's own failed requests are a fact about AIPerf and the engine (AIPerf does not
    # resend on a closed keep-alive connection); they must be imported as failures and left
    # out of the statistics, as AIPerf leaves them out.
    ok_lines = len(lines) - len(failed)
    res.row('aiperf-run', ok_lines > 0,
            f"{len(lines)} requests, {len(failed)} failed in AIPerf"
            + (f" ({', '.join(kinds)})" if kinds else '') + f", {comments} comment packets, "
            f"TTFT avg {theirs['time_to_first_token']['avg']:.1f} ms")
    if a.import_rc != 0 or not os.path.exists(a.trace):
        res.row('import', False, f'tokentrace import aiperf exit {a.import_rc}',
                a.import_log and open(a.import_log).read().splitlines()[-8:])
        return
    t = read_trace(a.trace)
    measured = [r for r in t['requests'] if r['phase'] == MEASURED]
    n_ok = sum(1 for r in measured if r['outcome'] == 0)
    want_ok = int(theirs['request_count']['avg'])
    want_err = int((theirs.get('error_request_count') or {}).get('avg') or 0)
    res.row('import', len(measured) == len(lines) and n_ok == want_ok
            and len(measured) - n_ok == want_err,
            f'exit 0, {len(measured)} measured = {n_ok} ok + {len(measured) - n_ok} failed '
            f'(AIPerf: {want_ok} + {want_err} errors), '
            f'{sum(len(r["chunks"]) for r in t["requests"])} chunks')

    ours = analyze(a.bin, a.trace, 'aiperf', 'json')
    worst = {AIPERF_REL: (0.0, None), AIPERF_THROUGHPUT_REL: (0.0, None)}
    bad, count = [], 0

    def close(what, got, want, rel):
        nonlocal count
        count += 1
        if not isinstance(got, (int, float)) or not isinstance(want, (int, float)):
            bad.append(f'{what}: got {got}, want {want}')
            return
        err = abs(got) if want == 0 else abs((got - want) / want)
        if err > worst[rel][0]:
            worst[rel] = (err, what)
        if err > rel:
            bad.append(f'{what}: got {got!r}, want {want!r} (relative error {err:.2e})')

    for metric in AIPERF_METRICS:
        want = theirs.get(metric)
        got = ours['metrics'].get(metric) or {}
        if not isinstance(want, dict):
            bad.append(f'{metric}: not in profile_export_aiperf.json')
            continue
        if got.get('unit') != want.get('unit'):
            bad.append(f"{metric}.unit: got {got.get('unit')}, want {want.get('unit')}")
        for stat, value in want.items():
            if stat != 'unit':
                close(f'{metric}.{stat}', got.get(stat), value, AIPERF_REL)
    for metric in AIPERF_THROUGHPUTS:
        close(metric, (ours.get('aggregates') or {}).get(metric), theirs[metric]['avg'],
              AIPERF_THROUGHPUT_REL)
    per_req, thr = worst[AIPERF_REL], worst[AIPERF_THROUGHPUT_REL]
    res.row('reproduce', not bad, f'{count} statistics · per-request worst {per_req[0]:.1e} '
            f'(tol {AIPERF_REL:g}) · throughputs worst {thr[0]:.1e} (tol '
            f'{AIPERF_THROUGHPUT_REL:g})', bad)


# ---------------------------------------------------------------- keep-alive
def cmd_keepalive(a, res):
    t = read_trace(a.trace)
    reqs = sorted((r for r in t['requests'] if r['phase'] == MEASURED), key=lambda r: r['send'])
    bad = [r for r in reqs if r['outcome'] != 0]
    conn = [r for r in bad if OUTCOMES[r['outcome']] in ('connect_error', 'stream_error')
            or 'connection' in (r['error'] or '').lower()]
    detail = not_ok_detail(bad)
    resent = sum(1 for r in reqs if r['retries'])
    fig = (f'{len(reqs)} requests: {len(bad)} failed, {len(conn)} with a connection error, '
           f'{resent} resent after a stale connection')
    ok = len(reqs) == a.expect and not bad
    if a.kind == 'idle':
        pauses = [r['send'] - p['end'] for p, r in zip(reqs, reqs[1:])]
        low = min(pauses) / 1e9 if pauses else 0.0
        fig += f' · idle between requests min {low:.1f} s (server keep-alive {a.idle_s:g} s)'
        if low <= a.idle_s:
            ok = False
            detail.append(f'pauses too short to test the idle close: {low:.2f} s')
    res.row(f'keepalive-{a.kind}', ok, fig, detail)


def cmd_fail(a, res):
    res.row(a.check, False, a.figure)


# ---------------------------------------------------------------- crash: kill -9 mid-stream
# A chunk reaches the trace through a checkpoint every 0.5 s and a block flushed at most 1 s
# later; the tap sees the kill as the client's close. Events the tap read this long before it
# must be in the trace.
CRASH_LOSS_BOUND_MS = 2000.0
INTERRUPTED = OUTCOMES.index('interrupted')


def cmd_crash(a, res):
    trace = read_trace(a.trace)
    exchanges, conns = load_tap(a.tap)
    reqs = [r for r in trace['requests'] if r['phase'] == MEASURED]
    streams = {}
    for e in exchanges:
        if e['path'].endswith('/completions'):
            streams.setdefault(e.get('x_request_id'), e)
    # The kill is when the client closed the streams' connections. Another connection the
    # client closed earlier (a description call's, once its pool dropped it) is no kill.
    stream_conns = {e['conn'] for e in streams.values()}
    killed_at = [c['t_close'] for c in conns
                 if c.get('closed_by') == 'client' and c.get('conn') in stream_conns]
    bad = []
    if trace['run_end'] is not None:
        bad.append(f"the trace has a run end ({trace['run_end'].get('reason')}): not killed?")
    if not killed_at:
        bad.append('the tap saw no connection closed by the client')
    kill = min(killed_at) if killed_at else 0
    kept, seen, lost_ms = 0, 0, []
    for r in reqs:
        if r['outcome'] != INTERRUPTED:
            bad.append(f"id {r['id']}: {OUTCOMES[r['outcome']]}, expected interrupted")
            continue
        _, sent = expected_request_id(trace, r['id'])
        e = streams.get(sent)
        if e is None or not e.get('sse'):
            bad.append(f"id {r['id']}: no tap exchange with its request id {sent}")
            continue
        wire = e['sse']['events_list']
        got = [c['text'] for c in r['chunks']]
        if got != [ev['data'] for ev in wire[:len(got)]]:
            bad.append(f"id {r['id']}: its {len(got)} chunks are not the first events on the wire")
            continue
        due = sum(1 for ev in wire if ev['t'] <= kill - CRASH_LOSS_BOUND_MS * 1e6)
        if len(got) < due:
            bad.append(f"id {r['id']}: {len(got)} chunks kept, the tap read {due} more than "
                       f"{CRASH_LOSS_BOUND_MS:g} ms before the kill")
        kept += len(got); seen += len(wire)
        if got:
            last = trace['header']['anchor_mono_ns'] + r['chunks'][-1]['arrival']
            lost_ms.append(ms(kill - last))
    started = len(streams)
    if len(reqs) != a.expect:
        bad.append(f'{len(reqs)} requests in the trace, {a.expect} started')
    fig = (f"{len(reqs)}/{a.expect} started requests kept as interrupted · {kept} of the {seen} "
           f"events the tap read kept · newest kept chunk "
           f"{min(lost_ms, default=0):.0f}-{max(lost_ms, default=0):.0f} ms before the kill "
           f"(bound {CRASH_LOSS_BOUND_MS:g} ms) · {started} streams on the wire")
    res.row('kill-9', not bad and bool(reqs), fig, bad)


# ---------------------------------------------------------------- golden: the reference reader
def cmd_golden(a, res):
    """The reference reader, written from docs/FORMAT.md alone, against tokentrace's own reader
    on every golden file: the same requests, chunks, interrupted requests and verdict."""
    for name in sorted(os.listdir(a.dir)):
        if not name.endswith('.trace'):
            continue
        path = os.path.join(a.dir, name)
        t = read_trace(path)
        ours = json.loads(subprocess.run([a.bin, 'inspect', path, '--json'], capture_output=True,
                                         text=True, timeout=60).stdout)
        theirs = dict(requests=len(t['requests']),
                      chunks=sum(len(r['chunks']) for r in t['requests']),
                      interrupted=t['interrupted'],
                      integrity='ok' if t['verdict'] == 'ok' else 'recovered')
        mine = dict(requests=ours['requests'], chunks=ours['chunks'],
                    interrupted=ours.get('interrupted_requests', 0), integrity=ours['integrity'])
        diff = [f'{k}: reference {theirs[k]}, tokentrace {mine[k]}' for k in theirs
                if theirs[k] != mine[k]]
        fig = (f"format {t['header']['major']}.{t['header']['minor']} · {theirs['requests']} "
               f"requests ({theirs['interrupted']} interrupted), {theirs['chunks']} chunks, "
               f"{t['verdict']} · = tokentrace inspect")
        res.row(f'golden:{name}', not diff, fig if not diff else '; '.join(diff), diff)


# ---------------------------------------------------------------- the tap's HTTP/2 reading
def cmd_tap_h2(a, res):
    """tap_h2_selftest.py: the tap reads what python-hyper's h2 wrote, however it is cut."""
    try:
        import tap_h2_selftest
        ok, figure, problems = tap_h2_selftest.run()
    except Exception as e:  # whatever broke, the row must say so: nothing else would
        ok, figure, problems = False, f'{type(e).__name__}: {str(e)[:200]}', None
    res.row('tap-h2', ok, figure, problems)


def cmd_table(a):
    rows = [json.loads(line) for line in open(a.results)] if os.path.exists(a.results) else []
    widths = [max([len(h)] + [len(str(r[k])) for r in rows])
              for h, k in (('engine', 'engine'), ('api', 'api'), ('check', 'check'))]
    head = f"{'engine':{widths[0]}}  {'api':{widths[1]}}  {'check':{widths[2]}}  result  figure"
    print(head)
    print('-' * min(len(head) + 60, 160))
    for r in rows:
        print(f"{r['engine']:{widths[0]}}  {r['api']:{widths[1]}}  {r['check']:{widths[2]}}  "
              f"{r['status']:6}  {r['figure']}")
    failed = [r for r in rows if r['status'] == 'FAIL']
    passed = sum(1 for r in rows if r['status'] == 'PASS')
    print(f'\n{passed} passed, {len(failed)} failed')
    return 1 if failed or not rows else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--results', required=True)
    sub = ap.add_subparsers(dest='cmd', required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--engine', required=True)
    common.add_argument('--api', default='chat')
    s = sub.add_parser('stream', parents=[common])
    s.add_argument('--bin', required=True)
    s.add_argument('--trace', required=True)
    s.add_argument('--tap', required=True)
    s.add_argument('--expect', type=int, required=True, help='measured requests planned')
    s.add_argument('--timings', action='store_true', help='engine streams llama.cpp timings')
    s.add_argument('--http2', action='store_true', help='the run must have used HTTP/2')
    s = sub.add_parser('aiperf', parents=[common])
    s.add_argument('--bin', required=True)
    s.add_argument('--export', required=True)
    s.add_argument('--trace', required=True)
    s.add_argument('--import-rc', type=int, required=True)
    s.add_argument('--import-log')
    s = sub.add_parser('keepalive', parents=[common])
    s.add_argument('--trace', required=True)
    s.add_argument('--kind', choices=['stale', 'idle'], required=True)
    s.add_argument('--expect', type=int, required=True)
    s.add_argument('--idle-s', type=float, default=5.0)
    s = sub.add_parser('crash', parents=[common])
    s.add_argument('--trace', required=True)
    s.add_argument('--tap', required=True)
    s.add_argument('--expect', type=int, required=True, help='requests started')
    s = sub.add_parser('golden', parents=[common])
    s.add_argument('--bin', required=True)
    s.add_argument('--dir', required=True, help='the golden files (tests/golden)')
    sub.add_parser('tap-h2', parents=[common])
    s = sub.add_parser('fail', parents=[common])
    s.add_argument('--check', required=True)
    s.add_argument('--figure', required=True)
    sub.add_parser('table')
    a = ap.parse_args()
    if a.cmd == 'table':
        sys.exit(cmd_table(a))
    res = Results(a.results, a.engine, a.api)
    try:
        {'stream': cmd_stream, 'aiperf': cmd_aiperf, 'keepalive': cmd_keepalive,
         'crash': cmd_crash, 'golden': cmd_golden, 'tap-h2': cmd_tap_h2,
         'fail': cmd_fail}[a.cmd](a, res)
    except (OSError, ValueError, AssertionError, KeyError, ImportError,
            subprocess.SubprocessError) as e:
        # A trace the reader refuses, a missing export, a failing analyze: a failed check.
        res.row(f'{a.cmd}-step', False, f'{type(e).__name__}: {str(e)[:200]}')
        sys.exit(1)


if __name__ == '__main__':
    main()
