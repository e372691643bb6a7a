#!/usr/bin/env bash
# Where the server's CPU goes while it serves images on the GPU (a diagnostic for docs/perf/clip_gpu.md's
# server finding; no perf on the GPU host): the same model and load as bench/server_gpu.sh's image saturation
# run, with `top -H` snapshots of the server's busiest threads, the CPU seconds of each thread group over the
# whole run (from /proc/PID/task/*/stat, grouped by thread name: mm-http, mm-poller, mm-prep, mm-eng0-<model>,
# ...; unnamed threads are the CUDA runtime's and OpenBLAS'), and `vmstat` of the whole machine.
#
#   bench/server_gpu_top.sh BIN_DIR OUT_DIR      env: CONNECTIONS (512), RATE (20000), DURATION (10),
#                                                     DEVICE (cuda; cpu: f32, for a dry run), ARCH (vit-b32; small)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "$1")
OUT=$(realpath -m "$2")
MMSERVE=$BIN/mmserve
DURATION=${DURATION:-10}
mkdir -p "$OUT"
# shellcheck source=bench/server_lib.sh
source "$ROOT/bench/server_lib.sh"
REPO=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-gpu-repo.XXXXXX")
trap 'srv_cleanup; rm -rf "$REPO"' EXIT

# "name ticks" for every thread of the server (utime + stime, in clock ticks).
thread_ticks() {
  for t in /proc/"$SRV_PID"/task/*; do
    echo "$(tr ' ' '_' <"$t/comm") $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0)"
  done
}

DTYPE=bf16
[ "${DEVICE:-cuda}" = cpu ] && DTYPE=f32
make_model "$REPO" clip-gpu "${ARCH:-vit-b32}" "device: ${DEVICE:-cuda}"$'\ndtype: '"$DTYPE"$'\nmax_batch_size: 64\nmax_queue_delay_ms: 2\nqueue_size: 4096'
printf 'classes:\n  - {name: image, kind: image, api: kserve, image_size: [224, 224], image_format: png}\n' >"$OUT/img.yaml"
srv_start top "$REPO" --http-threads 0
bench_run top_warmup --model clip-gpu --profile "$OUT/img.yaml" --rate 500 --duration 2 --connections 64
curl -s "$SRV_URL/metrics" >"$OUT/metrics_before.txt"
vmstat 2 $((DURATION / 2 + 1)) >"$OUT/vmstat.txt" &
VMSTAT=$!
(sleep 3; top -b -H -n 1 -w 200 -p "$SRV_PID" | head -45 >"$OUT/top_server_threads.txt"; top -b -n 1 -w 200 | head -25 >"$OUT/top_all.txt") &
TOP=$!
thread_ticks >"$OUT/ticks_before.txt"
bench_run top_images --model clip-gpu --profile "$OUT/img.yaml" --rate "${RATE:-20000}" --duration "$DURATION" \
  --connections "${CONNECTIONS:-512}"
thread_ticks >"$OUT/ticks_after.txt"
wait "$VMSTAT" "$TOP"  # not a bare wait: the server is a background child too
curl -s "$SRV_URL/metrics" >"$OUT/metrics_after.txt"
srv_stop
# Per thread group: threads, CPU seconds during the run, busiest thread's share of one core.
"$PY" - "$OUT" "$DURATION" "$(getconf CLK_TCK)" <<'PY' >"$OUT/thread_groups.txt"
import collections, os, re, sys
out, duration, hz = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def ticks(name):
    rows = []
    for line in open(os.path.join(out, name)):
        parts = line.split()
        if len(parts) == 2: rows.append((parts[0], int(parts[1])))
    return rows
before, after = ticks("ticks_before.txt"), ticks("ticks_after.txt")
# Threads are matched by position within a name (the same threads exist before and after the run).
def by_name(rows):
    groups = collections.defaultdict(list)
    for name, t in rows: groups[name].append(t)
    return groups
b, a = by_name(before), by_name(after)
print(f"| thread group | threads | CPU s in {duration:.0f} s | cores | busiest thread |")
print("|---|---|---|---|---|")
rows = []
for name, ts in a.items():
    bs = b.get(name, [])
    deltas = [t - (bs[i] if i < len(bs) else 0) for i, t in enumerate(ts)]
    rows.append((sum(deltas) / hz, name, len(ts), max(deltas) / hz))
for cpu, name, n, top in sorted(rows, reverse=True):
    if cpu < 0.05: continue
    print(f"| {name} | {n} | {cpu:.1f} | {cpu / duration:.2f} | {100 * top / duration:.0f}% |")
# Per-request means from the metrics' deltas.
def metrics(name):
    m = {}
    for line in open(os.path.join(out, name)):
        g = re.match(r'^(mmserve_[a-z_]+)\{model="clip-gpu",(?:priority|tower)="([a-z0-9]+)"\} ([0-9.e+-]+)$', line)
        if g: m[(g.group(1), g.group(2))] = m.get((g.group(1), g.group(2)), 0.0) + float(g.group(3))
    return m
m0, m1 = metrics("metrics_before.txt"), metrics("metrics_after.txt")
def d(key): return m1.get(key, 0.0) - m0.get(key, 0.0)
print()
for phase in ("preprocess", "queue", "compute", "request"):
    s = sum(d((f"mmserve_{phase}_duration_seconds_sum", p)) for p in "123")
    c = sum(d((f"mmserve_{phase}_duration_seconds_count", p)) for p in "123")
    if c: print(f"{phase}: {1000 * s / c:.2f} ms per request over {c:.0f} requests")
n = d(("mmserve_batch_size_count", "image"))
if n: print(f"image batches: {n:.0f}, mean batch {d(('mmserve_batch_size_sum', 'image')) / n:.1f}")
PY
tail -3 "$OUT/top_images.txt"
cat "$OUT/thread_groups.txt" "$OUT/vmstat.txt" "$OUT/top_server_threads.txt"
