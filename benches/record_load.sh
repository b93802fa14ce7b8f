#!/usr/bin/env bash
# Client CPU per chunk and peak RSS per open stream of `tokentrace record` against the
# simulator (a separate process on 127.0.0.1), at the concurrencies given (default 256 1024).
# The figures come from the trace's RunEnd.client_health (getrusage of the recorder only).
#
# Usage: benches/record_load.sh [CONCURRENCY...]
#   RECORD_ARGS="--checkpoint-every 0"   extra arguments for every `tokentrace record`
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet --bin tokentrace
BIN=target/release/tokentrace
PORT=${PORT:-18733}
OUT=$(mktemp -d)
levels=("$@")
[ ${#levels[@]} -eq 0 ] && levels=(256 1024)
# Enough slots for every stream; 20 ms decode steps so 1024 streams stay open at once.
"$BIN" sim --port "$PORT" --slots 4096 --step-base-ms 20 --step-per-seq-ms 0 \
  --prefill-tok-s 1000000 --prefill-base-ms 0 > "$OUT/sim.log" 2>&1 &
SIM=$!
trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT
sleep 1
for c in "${levels[@]}"; do
  # Four waves of c streams, 200 tokens each (one event per token).
  "$BIN" record --url "http://127.0.0.1:$PORT/v1" --model sim --progress off \
    --concurrency "$c" --requests $((c * 4)) --input-tokens 64 --max-tokens 200 --ignore-eos \
    --threads 1 ${RECORD_ARGS:-} -o "$OUT/c$c.tt" | sed "s/^/c=$c: /"
done
