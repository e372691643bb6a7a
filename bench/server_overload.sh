#!/usr/bin/env bash
# Behaviour at 2x overload, in one run (issue 3 item 10c): the server must shed the excess with 429 (no other
# errors, no timeouts) and its memory must stay bounded. The demo CLIP with its default mmserve.yaml
# (queue_size 256) serves the built-in mix (60% text / 30% images / 10% 1920x1080 JPEGs):
#   1. capacity: CAPACITY_S seconds far above capacity over 64 connections; ok/s = C;
#   2. overload: 2C req/s offered for DURATION s over OVERLOAD_CONNECTIONS connections (enough that arrivals
#      reach the server instead of being dropped by the client), while the server's VmRSS is read from
#      /proc/PID/status every 0.5 s.
# Pass when 429s > 0, no other HTTP error and no transport error, and the RSS of the run's second half is at
# most 10% above its first half (no growth with time under constant overload).
#
#   bench/server_overload.sh [BUILD_DIR (default build/cpu-release)] [OUT_DIR (default build/bench-results/server)]
#   env: DURATION (default 30), CAPACITY_S (default 10), OVERLOAD_CONNECTIONS (default 512),
#   HTTP_THREADS (default 0 = the server default, max(512, 16 x cores) since 65b4147; was 1024: more HTTP workers than connections, so requests reach the model queue and its
#   queue_size can answer 429; 0 = the server default), ENGINE_THREADS (default 1, as in server_batching.sh)
# Writes OUT_DIR/overload_*.json, OUT_DIR/overload_rss.txt and OUT_DIR/server_overload.json (keyed by
# commit) and prints the verdict with the RSS over time. Figures: docs/perf/server_cpu.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MMSERVE=$(realpath "${1:-$ROOT/build/cpu-release}/src/cli/mmserve")
OUT=$(realpath -m "${2:-$ROOT/build/bench-results/server}")
DURATION=${DURATION:-30}
CAPACITY_S=${CAPACITY_S:-10}
OVERLOAD_CONNECTIONS=${OVERLOAD_CONNECTIONS:-512}
HTTP_THREADS=${HTTP_THREADS:-0}
ENGINE_THREADS=${ENGINE_THREADS:-1}
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-bench-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

make_model "$REPO" clip small $'queue_size: 256\nthreads: '"$ENGINE_THREADS"
srv_start overload "$REPO" --http-threads "$HTTP_THREADS"
rss_start "$OUT/overload_rss.txt"
echo "server $SRV_URL (pid $SRV_PID); warming up" >&2
bench_run overload_warmup --model clip --rate 100 --duration 3
echo "capacity: $CAPACITY_S s far above it" >&2
bench_run overload_capacity --model clip --rate 1500 --duration "$CAPACITY_S" --connections 64
CAP=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["overall"]["throughput_ok_per_s"])' \
  "$OUT/overload_capacity.json")
RATE=$("$PY" -c "print(round(2 * $CAP, 1))")
echo "capacity $CAP ok/s; overload at $RATE req/s for $DURATION s over $OVERLOAD_CONNECTIONS connections" >&2
date +%s.%N >"$OUT/overload_window.txt"
bench_run overload_2x --model clip --rate "$RATE" --duration "$DURATION" --connections "$OVERLOAD_CONNECTIONS"
date +%s.%N >>"$OUT/overload_window.txt"
sleep 2  # a few samples after the overload
srv_stop

"$PY" "$ROOT/bench/server_summary.py" overload "$OUT" --commit "$(commit_id)" --host "$(host_desc)" \
  --note "engine threads $ENGINE_THREADS, http threads $HTTP_THREADS, $OVERLOAD_CONNECTIONS connections, $DURATION s"
