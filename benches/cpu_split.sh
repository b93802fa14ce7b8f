#!/usr/bin/env bash
# User and system CPU of the recorder and of the floor's child apart, at one level of the e2e
# benchmark: runs `cargo bench --bench e2e -- --levels STREAMS --steps STEP_MS --no-aiperf`
# RUNS times while reading each client's /proc/PID/stat every 50 ms, then prints, per
# process, its last user and system time (ms; the kernel counts them in ticks of 10 ms).
#
# Usage: benches/cpu_split.sh STREAMS STEP_MS [RUNS]   (RUNS: 3 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 STREAMS STEP_MS [RUNS]" >&2; exit 2; }
streams=$1 step=$2 runs=${3:-3}
tick_ms=$((1000 / $(getconf CLK_TCK)))
out=$(mktemp)
stop=$(mktemp -u)
trap 'rm -f "$out" "$stop"' EXIT

sample() {
  declare -A last
  until [ -e "$stop" ]; do
    for pid in $(pgrep -f "floor-child|tokentrace-record|tokentrace record" || true); do
      name=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
        | grep -o "floor-child\|tokentrace-record\|tokentrace record" | head -1 || true)
      [ -n "$name" ] || continue
      times=$(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null || true)
      [ -n "$times" ] && last["$pid $name"]=$times
    done
    sleep 0.05
  done
  for key in "${!last[@]}"; do echo "$key ${last[$key]}"; done > "$out"
}

sample &
sampler=$!
for _ in $(seq 1 "$runs"); do
  cargo bench --bench e2e -- --levels "$streams" --steps "$step" --no-aiperf 2>&1 \
    | grep -E "^  (recorder|floor):" | cut -c1-100
done
touch "$stop"
wait "$sampler"
echo "pid process user_ms system_ms"
awk -v t="$tick_ms" '{n=NF; print $1, $2 (n == 5 ? " " $3 : ""), $(n-1) * t, $n * t}' "$out" | sort -k2
