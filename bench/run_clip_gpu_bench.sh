#!/usr/bin/env bash
# GPU throughput of mmserve's CLIP (bf16) against HF transformers on the same GPU, same weights, same shapes, one run.
# Runs on the GPU host (torch + transformers installed). Matrix: ViT-B/32 vision 1,8,64,256; ViT-L/14 vision 1,64;
# ViT-B/32 text 1,256. HF eager and sdpa everywhere, interleaved with ours over two rounds (best of the rounds for
# every side); torch.compile (max-autotune-no-cudagraphs, one process per shape) for ViT-B/32 vision 256 and 1 and
# text 256 only, as max-autotune takes a minute or more per shape (COMPILE_ALL=1: every cell of the matrix).
#
#   bench/run_clip_gpu_bench.sh BIN_DIR RESULT_DIR
# BIN_DIR holds clip_throughput (built with CUDA). Environment: ITERS (30); COMPILE_ALL (0); DEADLINE_S (480: a cell
# that would start later is skipped and every cell's timeout is cut to fit, so the table always comes out);
# CELL_TIMEOUT_S (150); COMPILE_TIMEOUT_S (240). Writes RESULT_DIR/clip_gpu.json (all rows, the GEMM ceiling, the
# targets) and RESULT_DIR/<cell>.json/.err per process; progress goes to stderr, the markdown table comes last.
set -uo pipefail  # no -e: a failed cell is recorded as such and the run goes on
if [ $# -ne 2 ]; then
  echo "usage: $0 BIN_DIR RESULT_DIR" >&2
  exit 2
fi
BIN=$1
RES=$2
HF="$(cd "$(dirname "$0")" && pwd)/hf_clip_gpu.py"
ITERS=${ITERS:-30}
COMPILE_ALL=${COMPILE_ALL:-0}
DEADLINE_S=${DEADLINE_S:-480}
CELL_TIMEOUT_S=${CELL_TIMEOUT_S:-150}
COMPILE_TIMEOUT_S=${COMPILE_TIMEOUT_S:-240}
B32=/tmp/mmserve-gpu-vit-b32
L14=/tmp/mmserve-gpu-vit-l14
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # the host has no network; local directories only
mkdir -p "$RES"
: > "$RES/cells.tsv"
START=$SECONDS

# run_cell NAME TIMEOUT_S CMD...: stdout -> RES/NAME.json, stderr -> RES/NAME.err, "NAME<TAB>status<TAB>rc<TAB>s"
# -> RES/cells.tsv (status: ok, failed, timeout, skipped). Returns 0 only when the command succeeded.
run_cell() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE_S - (SECONDS - START) - 10))
  if [ "$left" -lt 20 ]; then
    printf '%s\tskipped\t-\t0\n' "$name" >> "$RES/cells.tsv"
    echo "[$((SECONDS - START))s] $name: skipped (past DEADLINE_S=$DEADLINE_S)" >&2
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS rc status=ok
  timeout -k 10 "$limit" "$@" > "$RES/$name.json" 2> "$RES/$name.err"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=timeout
  elif [ "$rc" -ne 0 ]; then
    status=failed
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$((SECONDS - t0))" >> "$RES/cells.tsv"
  echo "[$((SECONDS - START))s] $name: $status (rc $rc, $((SECONDS - t0))s)" >&2
  [ "$status" = ok ]
}

# save_ckpt ARCH DIR: the random-weight bf16 checkpoint, unless already there (written aside, then moved in).
save_ckpt() {
  [ -f "$2/model.safetensors" ] && [ -f "$2/config.json" ] && return 0
  rm -rf -- "$2.partial"
  if run_cell "save_$1" 300 python3 "$HF" --save "$2.partial" --arch "$1"; then
    rm -rf -- "$2"
    mv -- "$2.partial" "$2"
  fi
}

save_ckpt vit-b32 "$B32"
save_ckpt vit-l14 "$L14"
run_cell gemm_ceiling 120 python3 "$HF" --gemm-ceiling

# "arch dir tower batches": the cells the targets are about, plus the batch sizes around them.
MATRIX=("vit-b32 $B32 vision 1,8,64,256" "vit-l14 $L14 vision 1,64" "vit-b32 $B32 text 1,256")
for round in 1 2; do  # interleaved so that drift (clocks, temperature) hits every side alike
  for spec in "${MATRIX[@]}"; do
    read -r arch dir tower batches <<< "$spec"
    run_cell "ours_${arch}_${tower}_r$round" "$CELL_TIMEOUT_S" "$BIN/clip_throughput" --model "$dir" \
      --device cuda --dtype bf16 --tower "$tower" --batches "$batches" --iters "$ITERS"
    for mode in eager sdpa; do
      run_cell "${mode}_${arch}_${tower}_r$round" "$CELL_TIMEOUT_S" python3 "$HF" --model "$dir" --arch "$arch" \
        --tower "$tower" --batches "$batches" --mode "$mode" --iters "$ITERS" --dtype bf16
    done
  done
done

if [ "$COMPILE_ALL" = 1 ]; then
  COMPILE=("${MATRIX[@]}")
else  # the cells with targets first, in case the deadline cuts the list
  COMPILE=("vit-b32 $B32 vision 256" "vit-b32 $B32 text 256" "vit-b32 $B32 vision 1")
fi
for spec in "${COMPILE[@]}"; do
  read -r arch dir tower batches <<< "$spec"
  for batch in ${batches//,/ }; do
    run_cell "compile_${arch}_${tower}_b$batch" "$COMPILE_TIMEOUT_S" python3 "$HF" --model "$dir" --arch "$arch" \
      --tower "$tower" --batches "$batch" --mode compile --iters "$ITERS" --dtype bf16
  done
done

COMMIT=${COMMIT:-$(git -C "$(dirname "$HF")" rev-parse --short HEAD 2>/dev/null || echo unknown)}
MATRIX_SPEC=$(for spec in "${MATRIX[@]}"; do read -r a _ t b <<< "$spec"; printf '%s:%s:%s ' "$a" "$t" "$b"; done)
python3 - "$RES" "$ITERS" "$COMPILE_ALL" "$((SECONDS - START))" "$COMMIT" "$MATRIX_SPEC" <<'PY'
import glob, json, os, sys

res, iters, compile_all, elapsed, commit, matrix_spec = sys.argv[1:7]
# Per-item FLOPs (2 per multiply-add) from the architectures' shapes: (hidden, mlp, layers, tokens), projection.
ARCH = {"vit-b32": {"vision": (768, 3072, 12, 50), "text": (512, 2048, 12, 77), "proj": 512, "patch": 32},
        "vit-l14": {"vision": (1024, 4096, 24, 257), "text": (768, 3072, 12, 77), "proj": 768, "patch": 14}}
# (arch, tower, batch, row key, bound, label): ratios are throughput ratios, mmserve_ms is mmserve's median.
TARGETS = [("vit-b32", "vision", 256, "ratio_vs_hf_eager", 2.0, ">= 2x HF eager"),
           ("vit-b32", "vision", 1, "mmserve_ms", 0.6, "<= 0.6 ms"),
           ("vit-l14", "vision", 64, "ratio_vs_hf_eager", 1.5, ">= 1.5x HF eager"),
           ("vit-b32", "text", 256, "ratio_vs_hf_eager", 2.0, ">= 2x HF eager")]


def flops(arch, tower):
    a = ARCH.get(arch)
    if a is None:
        return None
    d, ff, layers, n = a[tower]
    f = layers * (n * (8 * d * d + 4 * d * ff) + 4 * n * n * d) + 2 * d * a["proj"]
    if tower == "vision":
        f += 2 * (n - 1) * 3 * a["patch"] ** 2 * d  # patch embedding
    return f


def load(name):  # the last JSON line of a cell's stdout, or None
    try:
        lines = open(os.path.join(res, name + ".json")).read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


cells = {}
for line in open(os.path.join(res, "cells.tsv")):
    name, status, rc, secs = line.rstrip("\n").split("\t")
    cells[name] = status
meta = {}


def best(prefix, tower, batch):
    """(row with the lowest median_ms over the cells NAME*, status when there is none)."""
    names = sorted(n for n in cells if n == prefix or n.startswith(prefix + "_r"))
    if not names:
        return None, "-"
    found = None
    for name in names:
        doc = load(name)
        if not doc:
            continue
        for k in ("gpu", "torch", "transformers"):
            if doc.get(k) and not meta.get(k):
                meta[k] = doc[k]
        for r in doc.get("results", []):
            if r.get("tower", tower) == tower and r.get("batch") == batch and r.get("median_ms"):
                if found is None or r["median_ms"] < found["median_ms"]:
                    found = r
    if found:
        return found, "ok"
    states = {cells[n] for n in names}
    return None, "skipped" if states == {"skipped"} else "timeout" if "timeout" in states else "failed"


gemm = load("gemm_ceiling") or {}
ceiling = gemm.get("bf16_gemm_tflops")
rows = []
for spec in matrix_spec.split():
    arch, tower, batches = spec.split(":")
    for batch in (int(b) for b in batches.split(",")):
        row = {"arch": arch, "tower": tower, "batch": batch, "status": {}}
        sides = {"mmserve": best(f"ours_{arch}_{tower}", tower, batch),
                 "hf_eager": best(f"eager_{arch}_{tower}", tower, batch),
                 "hf_sdpa": best(f"sdpa_{arch}_{tower}", tower, batch),
                 "hf_compile": best(f"compile_{arch}_{tower}_b{batch}", tower, batch)}
        for side, (r, status) in sides.items():
            row[side + "_ms"] = r["median_ms"] if r else None
            row[side + "_per_s"] = r["per_s"] if r else None
            row["status"][side] = status
            if r and "median_wall_ms" in r:
                row[side + "_wall_ms"] = r["median_wall_ms"]
            if r and "compile_s" in r:
                row["hf_compile_s"] = r["compile_s"]
        ours = row["mmserve_ms"]
        base = {k: row[k + "_ms"] for k in ("hf_eager", "hf_sdpa", "hf_compile") if row[k + "_ms"]}
        row["best_baseline"] = min(base, key=base.get) if base else None
        row["ratio_vs_hf_eager"] = row["hf_eager_ms"] / ours if ours and row["hf_eager_ms"] else None
        row["ratio_vs_best_baseline"] = base[row["best_baseline"]] / ours if ours and base else None
        f = flops(arch, tower)
        row["mmserve_tflops"] = f * batch / (ours * 1e-3) / 1e12 if ours and f else None
        row["mmserve_pct_of_gemm_ceiling"] = (100.0 * row["mmserve_tflops"] / ceiling
                                              if row["mmserve_tflops"] and ceiling else None)
        rows.append(row)


def verdict(met):
    return "unknown" if met is None else "met" if met else "not met"


targets, shown_targets = [], []
for arch, tower, batch, key, bound, label in TARGETS:
    row = next((r for r in rows if (r["arch"], r["tower"], r["batch"]) == (arch, tower, batch)), None)
    value = row.get(key) if row else None
    met = None if value is None else (value <= bound if key == "mmserve_ms" else value >= bound)
    shown = "" if value is None else f" ({value:.3f} ms)" if key == "mmserve_ms" else f" ({value:.2f}x)"
    targets.append({"target": f"{arch} {tower} b{batch} {label}", "key": key, "bound": bound, "value": value,
                    "met": met})
    shown_targets.append(f"{arch} {tower} b{batch} {label}: **{verdict(met)}**{shown}")
    if row is not None:
        row["target"], row["target_met"] = label, met

json.dump({"commit": commit, "gpu": meta.get("gpu") or gemm.get("gpu"), "torch": meta.get("torch"),
           "transformers": meta.get("transformers"), "dtype": "bf16", "iters": int(iters),
           "compile_all": compile_all == "1", "elapsed_s": int(elapsed), "bf16_gemm_tflops": ceiling,
           "targets": targets, "rows": rows, "cells": cells},
          open(os.path.join(res, "clip_gpu.json"), "w"), indent=1)


def ms(row, side):
    v = row[side + "_ms"]
    return f"{v:.3f}" if v else row["status"][side]


def ratio(v):
    return f"{v:.2f}x" if v else "-"


print(f"## CLIP bf16 on {meta.get('gpu') or gemm.get('gpu')}: mmserve {commit} vs HF transformers "
      f"{meta.get('transformers')} (torch {meta.get('torch')}), median of {iters} iters, best of 2 rounds; "
      f"measured bf16 GEMM ceiling " + (f"{ceiling:.0f} TFLOPS" if ceiling else "failed"))
print("Targets (from the issue): " + "; ".join(shown_targets))
print()
print("| arch | tower | batch | mmserve ms | mmserve /s | HF eager ms | HF sdpa ms | torch.compile ms | vs HF eager "
      "| vs best baseline | target |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    per_s = f"{r['mmserve_per_s']:.0f}" if r["mmserve_per_s"] else "-"
    target = f"{r['target']}: {verdict(r['target_met'])}" if "target" in r else ""
    print(f"| {r['arch']} | {r['tower']} | {r['batch']} | {ms(r, 'mmserve')} | {per_s} | {ms(r, 'hf_eager')} | "
          f"{ms(r, 'hf_sdpa')} | {ms(r, 'hf_compile')} | {ratio(r['ratio_vs_hf_eager'])} | "
          f"{ratio(r['ratio_vs_best_baseline'])} | {target} |")
PY
