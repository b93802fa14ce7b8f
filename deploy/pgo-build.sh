#!/usr/bin/env bash
# The recorder built with profile-guided optimisation, for load hosts where its own CPU per
# chunk matters (docs/performance/2026-12-07.md, "A profile-guided build").
#
#   deploy/pgo-build.sh [--no-check]
#
# 1. builds an instrumented tokentrace-record (counters in every branch);
# 2. runs it under the e2e benchmark's load against the engine simulator, plain and over TLS
#    (`cargo bench --bench e2e`, a few seconds per level), which leaves one profile per run;
# 3. merges the profiles with llvm-profdata (rustup's llvm-tools component, added here when
#    missing: it must match the compiler's own LLVM);
# 4. builds tokentrace-record and tokentrace again with that profile, into target/pgo/release/;
# 5. unless --no-check: runs tests/record_binary.rs against the new tokentrace-record and
#    tests/record_e2e.rs against the new tokentrace.
#
# The program is the same source: only the compiler's layout and inlining choices follow the
# profile. The builds with a profile go to target/pgo/; the training builds the benchmark and
# the simulator in target/release/ as `cargo bench` always does.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=1
for arg in "$@"; do
  case $arg in
    --no-check) check=0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print substr($0, 3); next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[pgo %(%H:%M:%S)T] %s\n' -1 "$*"; }

out=$PWD/target/pgo
raw=$out/profiles
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
  log "adding rustup's llvm-tools component (llvm-profdata)"
  rustup component add llvm-tools
fi
[ -x "$profdata" ] || { echo "no llvm-profdata at $profdata" >&2; exit 2; }

# RUSTFLAGS changes every crate's build, so each stage has a target directory of its own.
log "instrumented build"
rm -rf "$raw"
mkdir -p "$raw"
RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release --locked --no-default-features \
  --bin tokentrace-record --target-dir "$out/instrumented"
instrumented=$out/instrumented/release/tokentrace-record

# The levels span one event per read (64 streams × 10 ms) to dozens per read (2,048 × 2 ms);
# the TLS runs add rustls's record path. --no-floor: only the recorder's runs matter here.
log "training runs against the simulator"
cargo bench --locked --bench e2e -- --levels 64,1024,2048 --steps 10,2 --no-aiperf \
  --no-floor --record-bin "$instrumented"
cargo bench --locked --bench e2e -- --levels 64,1024 --steps 2 --no-aiperf --no-floor --tls \
  --record-bin "$instrumented"
compgen -G "$raw/*.profraw" > /dev/null || { echo "the training runs left no profile" >&2; exit 1; }

log "merging $(find "$raw" -name '*.profraw' | wc -l) profiles"
"$profdata" merge -o "$out/merged.profdata" "$raw"

log "optimised builds"
RUSTFLAGS="-Cprofile-use=$out/merged.profdata" cargo build --release --locked \
  --no-default-features --bin tokentrace-record --target-dir "$out"
RUSTFLAGS="-Cprofile-use=$out/merged.profdata" cargo build --release --locked \
  --bin tokentrace --target-dir "$out"

if [ "$check" = 1 ]; then
  log "tests/record_binary.rs and tests/record_e2e.rs against the optimised binaries"
  TOKENTRACE_RECORD_BIN=$out/release/tokentrace-record cargo test --locked \
    --test record_binary
  TOKENTRACE_BIN=$out/release/tokentrace cargo test --locked --test record_e2e
fi
log "done: $out/release/tokentrace-record and $out/release/tokentrace"
