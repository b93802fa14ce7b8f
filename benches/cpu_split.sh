#!/usr/bin/env bash
# User and system CPU of the recorder and of the floor's child apart, at one level of the e2e
# benchmark: runs `cargo bench --bench e2e -- --levels STREAMS --steps STEP_MS --no-aiperf`
# RUNS times while reading each client's /proc/PID/stat every 50 ms, then prints, per
# process, its last user and system time (ms; the kernel counts them in ticks of 10 ms), and
# per thread of either client (its name from /proc/PID/task/TID/comm) the same with its minor
# page faults and its voluntary and involuntary context switches (/proc/PID/task/TID/status).
#
# Usage: benches/cpu_split.sh STREAMS STEP_MS [RUNS]   (RUNS: 3 by default)
#   E2E_ARGS="--no-floor --record-bin B"   more arguments for every e2e run
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 STREAMS STEP_MS [RUNS]" >&2; exit 2; }
streams=$1 step=$2 runs=${3:-3}
tick_ms=$((1000 / $(getconf CLK_TCK)))
out=$(mktemp)
stop=$(mktemp -u)
trap 'rm -f "$out" "$out.threads" "$stop"' EXIT

sample() {
  declare -A last threads
  until [ -e "$stop" ]; do
    for pid in $(pgrep -f "floor-child|tokentrace-record|tokentrace record" || true); do
      name=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
        | grep -o "floor-child\|tokentrace-record\|tokentrace record" | head -1 || true)
      [ -n "$name" ] || continue
      # The benchmark itself names the recorder's binary in its own arguments.
      # (the floor's child is that binary too, so only the recorder's names are checked).
      if [ "$name" != floor-child ]; then
        case $(cat "/proc/$pid/comm" 2>/dev/null) in e2e* | cargo*) continue ;; esac
      fi
      times=$(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null || true)
      [ -n "$times" ] && last["$pid $name"]=$times
      for task in /proc/"$pid"/task/*; do
        thread=$(cat "$task/comm" 2>/dev/null || true)
        # The fields after the parenthesised name: minflt is the 8th, utime and stime the 12th
        # and 13th.
        times=$(sed 's/.*) //' "$task/stat" 2>/dev/null | awk '{print $12, $13, $8}' || true)
        switches=$(awk '/^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ \
          { n = $2 } END { print v, n }' "$task/status" 2>/dev/null || true)
        [ -n "$thread" ] && [ -n "$times" ] \
          && threads["$pid ${task##*/} $thread"]="$times $switches"
      done
    done
    sleep 0.05
  done
  for key in "${!last[@]}"; do echo "$key ${last[$key]}"; done > "$out"
  for key in "${!threads[@]}"; do echo "$key ${threads[$key]}"; done > "$out.threads"
}

sample &
sampler=$!
for _ in $(seq 1 "$runs"); do
  # shellcheck disable=SC2086 # E2E_ARGS is a list of arguments
  cargo bench --bench e2e -- --levels "$streams" --steps "$step" --no-aiperf ${E2E_ARGS:-} 2>&1 \
    | grep -E "^  (recorder|floor):" | cut -c1-100
done
touch "$stop"
wait "$sampler"
echo "pid process user_ms system_ms"
awk -v t="$tick_ms" '{n=NF; print $1, $2 (n == 5 ? " " $3 : ""), $(n-1) * t, $n * t}' "$out" | sort -k2
echo
echo "pid tid thread user_ms system_ms minor_faults voluntary_switches involuntary_switches"
awk -v t="$tick_ms" '{print $1, $2, $3, $4 * t, $5 * t, $6, $7, $8}' "$out.threads" \
  | sort -k1,1 -k3
