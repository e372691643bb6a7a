#!/usr/bin/env bash
# Real clients against the real server. Each mode starts `mmserve serve` on a free loopback port with a
# temporary model repository holding a copy of tests/fixtures/clip-tiny-quickgelu-f32, waits for
# /v2/health/ready, runs one client, and stops the server (SIGTERM, then SIGKILL after 15 s):
#   openai      the official `openai` npm SDK (tests/e2e/openai): embeddings equal HF's goldens, SDK errors
#   openai-audio  the same SDK's audio.transcriptions/translations.create against the tiny Whisper fixture
#               (tests/e2e/openai/audio.test.mjs): every response_format, stream events, SDK errors
#   openai-completions  the same SDK's completions / chat.completions against the real stories260K
#               (tests/e2e/openai/completions.test.mjs): run.c's story, streaming, usage, stop, seeds, SDK errors;
#               a chat with an image (data URL) on the tiny HF LLaVA
#   prometheus  a real Prometheus scraping the server every 1 s with deploy/prometheus/mmserve_rules.yml:
#               SPEC 5.3's two PromQL expressions and the recorded series are numbers; promtool check metrics
#   locust      a 10 s headless Locust run of deploy/locust/locustfile.py: requests made, zero failures
#   bench       `mmserve bench`: JSON report, ok > 0, no 5xx; every payload kind over both APIs; client drops;
#               every request sent counted ok; a wrong model's 404s counted as errors; usage errors
#   bench-wire  `mmserve bench`'s HTTP client against a scripted server (bench_wire_server.py): the request
#               head byte for byte as cpp-httplib 0.11.4 wrote it, keep-alive reuse, chunked / close-delimited /
#               100 Continue / HTTP/1.0 answers ok, 503s counted as errors, broken and unanswered requests as
#               transport errors, server-closed idle connections reopened
#   bench-generate  `mmserve bench --generate` against the real stories260K: closed loop with a shared prefix and
#               open loop with a text prompt; counts, token totals, latencies positive and ordered; usage errors
#
#   tests/e2e/client_test.sh MODE path/to/mmserve SOURCE_DIR       (ctest -L e2e runs all four)
# Needs curl, python3, node + `npm ci --prefix tests/e2e/openai`, prometheus + promtool, locust (make deps).
set -euo pipefail

MODE=${1:?mode: openai | openai-audio | openai-completions | prometheus | locust | bench | bench-wire | bench-generate}
MMSERVE=$(realpath "${2:?path to the mmserve binary}")
SRC=$(realpath "${3:?source directory}")
MODEL=clip-tiny-quickgelu-f32
FIXTURE=$SRC/tests/fixtures/$MODEL
TMP=$(mktemp -d "${TMPDIR:-/tmp}/mmserve-client-$MODE.XXXXXX")
SERVER_PID=""
PROM_PID=""
PY=/usr/bin/python3  # Debian's python3: python3-yaml/requests/locust are installed for it (make deps)
[ -x "$PY" ] || PY=python3

stop_pid() {  # stop_pid PID: SIGTERM, wait up to 15 s, then SIGKILL
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "pid $pid ignored SIGTERM for 15 s; killing" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

on_exit() {
  local status=$?
  stop_pid "$PROM_PID"
  stop_pid "$SERVER_PID"
  if [ "$status" != 0 ]; then
    echo "---- FAILED ($MODE); server log tail:" >&2
    tail -n 40 "$TMP/server.log" 2>/dev/null >&2 || true
    [ -f "$TMP/prometheus.log" ] && { echo "---- prometheus log tail:" >&2; tail -n 20 "$TMP/prometheus.log" >&2; }
  fi
  rm -rf "$TMP"
}
trap on_exit EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_server [serve flags...]: sets URL; fails if the server is not ready within 60 s.
start_server() {
  mkdir -p "$TMP/models"
  cp -rL "$FIXTURE" "$TMP/models/$MODEL"   # -L: the fixture's tokenizer.json is a relative symlink
  local port
  port=$(free_port)
  URL=http://127.0.0.1:$port
  "$MMSERVE" serve --model-repository "$TMP/models" --host 127.0.0.1 --port "$port" "$@" >"$TMP/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || fail "mmserve serve exited before it was ready"
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/v2/health/ready" || true)" = 200 ] && return 0
    sleep 0.1
  done
  fail "mmserve serve not ready after 60 s"
}

json_get() {  # json_get FILE PYTHON_EXPR (over `r`): prints the value
  "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

run_openai() {
  local dir=$SRC/tests/e2e/openai
  [ -d "$dir/node_modules/openai" ] || npm ci --prefix "$dir" --no-audit --no-fund \
    || fail "the openai package is missing: run npm ci --prefix tests/e2e/openai"
  start_server --api-key sk-mmserve-test
  MMSERVE_URL=$URL MMSERVE_API_KEY=sk-mmserve-test MMSERVE_MODEL=$MODEL MMSERVE_FIXTURE_DIR=$FIXTURE \
    MMSERVE_IMAGE_DIR=$SRC/tests/fixtures/images node --test "$dir/embeddings.test.mjs"
}

run_openai_audio() {
  local dir=$SRC/tests/e2e/openai
  [ -d "$dir/node_modules/openai" ] || npm ci --prefix "$dir" --no-audit --no-fund \
    || fail "the openai package is missing: run npm ci --prefix tests/e2e/openai"
  # Two copies of the Whisper fixture beside the CLIP one: one with a 5 s audio limit (jfk.wav is 11 s).
  local whisper=$SRC/tests/fixtures/whisper/whisper-tiny-mel80-f32 name
  for name in whisper-tiny whisper-short; do
    mkdir -p "$TMP/models/$name"
    find "$whisper" -maxdepth 1 -type f ! -name 'golden*' -exec cp {} "$TMP/models/$name/" \;
  done
  echo "audio_seconds_max: 5" >"$TMP/models/whisper-short/mmserve.yaml"
  start_server --api-key sk-mmserve-test
  MMSERVE_URL=$URL MMSERVE_API_KEY=sk-mmserve-test MMSERVE_WHISPER=whisper-tiny MMSERVE_WHISPER_SHORT=whisper-short \
    MMSERVE_MODEL=$MODEL MMSERVE_WHISPER_DIR=$TMP/models/whisper-tiny MMSERVE_AUDIO=$SRC/tests/fixtures/audio/jfk.wav \
    MMSERVE_BINARY=$MMSERVE node --test "$dir/audio.test.mjs"
}

run_openai_completions() {
  local dir=$SRC/tests/e2e/openai
  [ -d "$dir/node_modules/openai" ] || npm ci --prefix "$dir" --no-audit --no-fund \
    || fail "the openai package is missing: run npm ci --prefix tests/e2e/openai"
  # The real stories260K, converted by our command, with a chat template (Llama 2's, from the template fixtures).
  "$MMSERVE" convert-llama2c --checkpoint "$SRC/assets/llama2c/stories260K.bin" \
    --tokenizer "$SRC/assets/llama2c/tok512.bin" --output "$TMP/models/stories" 2>/dev/null \
    || fail "convert-llama2c failed"
  cp "$SRC/tests/fixtures/chat_templates/templates/llama2.jinja" "$TMP/models/stories/chat_template.jinja"
  # The tiny HF LLaVA (tests/fixtures/llava) with the servable tokenizer and chat template (llava_servable).
  mkdir -p "$TMP/models/llava"
  cp "$SRC"/tests/fixtures/llava/llava-llama-f32/{config.json,model.safetensors,preprocessor_config.json} \
     "$SRC"/tests/fixtures/llava_servable/{tokenizer.json,chat_template.jinja} "$TMP/models/llava/"
  start_server --api-key sk-mmserve-test
  MMSERVE_URL=$URL MMSERVE_API_KEY=sk-mmserve-test MMSERVE_LLM=stories MMSERVE_MODEL=$MODEL MMSERVE_VLM=llava \
    MMSERVE_IMAGE=$SRC/tests/fixtures/images/chelsea.png \
    MMSERVE_GOLDEN=$SRC/tests/fixtures/llama2c/stories260K_golden_t0.txt node --test "$dir/completions.test.mjs"
}

# prom_query EXPR: prints the single sample's value of an instant query, or fails.
prom_query() {
  curl -s --max-time 10 -G "$PROM_URL/api/v1/query" --data-urlencode "query=$1" >"$TMP/query.json"
  "$PY" - "$TMP/query.json" "$1" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success", r
result = r["data"]["result"]
assert len(result) == 1, f"{sys.argv[2]}: expected one sample, got {result}"
value = float(result[0]["value"][1])
assert math.isfinite(value), f"{sys.argv[2]}: {value} is not a finite number"
print(value)
PY
}

run_prometheus() {
  start_server
  curl -sf --max-time 10 "$URL/metrics" >"$TMP/metrics.txt" || fail "GET /metrics"
  promtool check metrics <"$TMP/metrics.txt" || fail "promtool check metrics found problems in /metrics"
  local pport
  pport=$(free_port)
  PROM_URL=http://127.0.0.1:$pport
  cat >"$TMP/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$SRC/deploy/prometheus/mmserve_rules.yml"]
scrape_configs:
  - job_name: mmserve
    static_configs: [{targets: ["127.0.0.1:${URL##*:}"]}]
EOF
  promtool check config "$TMP/prometheus.yml" >/dev/null || fail "promtool check config"
  prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom-data" \
    --web.listen-address="127.0.0.1:$pport" >"$TMP/prometheus.log" 2>&1 &
  PROM_PID=$!
  local up=""
  for _ in $(seq 1 300); do
    kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited"
    up=$(prom_query 'up{job="mmserve"}' 2>/dev/null || true)
    [ "$up" = "1.0" ] && break
    sleep 0.1
  done
  [ "$up" = "1.0" ] || fail "prometheus never scraped the server (up=$up)"
  # Traffic over several scrapes: successes, then 5xx (the model unloaded: known but not ready -> 503).
  "$MMSERVE" bench --url "$URL" --rate 15 --duration 4 --connections 8 --output json >"$TMP/bench.json" \
    || fail "mmserve bench"
  curl -sf -X POST --max-time 30 "$URL/v2/repository/models/$MODEL/unload" >/dev/null || fail "unload"
  local code round
  for round in 1 2; do  # two bursts a few scrapes apart: rate() needs the 5xx counter to rise between samples
    for _ in 1 2 3; do
      code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --max-time 10 \
        -d '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["x"]}]}' "$URL/v2/models/$MODEL/infer")
      [ "${code:0:1}" = 5 ] || fail "infer on an unloaded model answered $code, not 5xx"
    done
    [ "$round" = 1 ] && sleep 2.5
  done
  curl -sf -X POST --max-time 60 "$URL/v2/repository/models/$MODEL/load" >/dev/null || fail "load"
  sleep 3  # scrapes after the traffic, and rule evaluations over them
  local p95 ratio
  p95=$(prom_query 'histogram_quantile(0.95, sum(rate(http_request_duration_seconds_bucket[5m])) by (le))') \
    || fail "SPEC 5.3 p95 expression"
  ratio=$(prom_query 'sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m]))') \
    || fail "SPEC 5.3 5xx ratio expression"
  echo "p95 = $p95 s, 5xx ratio = $ratio"
  "$PY" -c "import sys; p, r = $p95, $ratio; sys.exit(0 if 0 < p < 30 and 0 < r < 1 else 1)" \
    || fail "p95 $p95 or ratio $ratio out of range"
  prom_query 'mmserve:http_request_duration_seconds:p95_rate5m' >/dev/null || fail "recorded p95 missing"
  prom_query 'mmserve:http_requests_5xx:ratio_rate5m' >/dev/null || fail "recorded 5xx ratio missing"
  curl -s --max-time 10 "$PROM_URL/api/v1/rules" >"$TMP/rules.json"
  "$PY" - "$TMP/rules.json" <<'PY' || fail "rules not healthy"
import json, sys
groups = json.load(open(sys.argv[1]))["data"]["groups"]
rules = {r["name"]: r for g in groups for r in g["rules"]}
for name in ("MmserveLatencyP95AboveSLO", "MmserveErrorRatioAboveSLO", "MmserveTargetDown",
             "mmserve:http_request_duration_seconds:p95_rate5m", "mmserve:http_requests_5xx:ratio_rate5m"):
    assert name in rules, f"{name} not loaded"
    assert rules[name]["health"] == "ok", f"{name}: {rules[name].get('lastError')}"
PY
}

run_locust() {
  start_server
  PYTHONDONTWRITEBYTECODE=1 MMSERVE_MODEL=$MODEL MMSERVE_IMAGE_DIR=$SRC/tests/fixtures/images \
    locust -f "$SRC/deploy/locust/locustfile.py" --headless -u 10 -r 5 -t 10s --host "$URL" \
    --csv "$TMP/locust" --only-summary >"$TMP/locust.log" 2>&1 || { tail -n 30 "$TMP/locust.log"; fail "locust"; }
  tail -n 20 "$TMP/locust.log"
  "$PY" - "$TMP/locust_stats.csv" <<'PY' || fail "locust stats"
import csv, sys
rows = {r["Name"]: r for r in csv.DictReader(open(sys.argv[1]))}
total = rows["Aggregated"]
assert int(total["Request Count"]) > 20, f"too few requests: {total['Request Count']}"
assert int(total["Failure Count"]) == 0, f"{total['Failure Count']} failures"
for name in ("text (openai)", "image (kserve)"):
    assert name in rows and int(rows[name]["Request Count"]) > 0, f"no {name} requests"
PY
}

run_bench() {
  start_server --api-key bench-key
  local out=$TMP/bench.json
  # 1. The built-in mix (text over OpenAI, images and 1920x1080 JPEGs over KServe) for 5 s.
  "$MMSERVE" bench --url "$URL" --api-key bench-key --rate 20 --duration 5 --connections 16 --seed 7 \
    --output json --json-file "$out" >"$TMP/bench_stdout.json" || fail "mmserve bench (built-in mix)"
  cmp -s "$out" "$TMP/bench_stdout.json" || fail "--json-file differs from --output json"
  "$PY" - "$out" "$MODEL" <<'PY' || fail "built-in mix report"
import json, sys
r = json.load(open(sys.argv[1]))
o = r["overall"]
print({k: o[k] for k in ("arrivals", "sent", "ok", "rejected_429", "http_5xx", "dropped_by_client")}, o["latency_ms"])
assert r["config"]["model"] == sys.argv[2], r["config"]
assert o["ok"] > 0 and o["http_5xx"] == 0 and not o["errors"] and not o["transport_errors"], o
assert o["sent"] + o["dropped_by_client"] == o["arrivals"], o
assert [c["name"] for c in r["classes"]] == ["text", "image", "large_image"]
for c in r["classes"]:
    assert c["ok"] > 0, f"class {c['name']}: {c}"
    lat = c["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], lat
PY
  # 2. Every kind over both APIs, fixture files and synthesised images, deadlines, base64: all must be 200.
  local images=$SRC/tests/fixtures/images
  cat >"$TMP/profile.yaml" <<EOF
timeout_s: 20
classes:
  - {name: k-text, kind: text, api: kserve, priority: 1, texts: ["a photo of a cat", "猫の写真 🐈"]}
  - {name: k-image, kind: image, api: kserve, priority: 2, images: [$images/rocket.jpg, $images/chelsea_lossless.webp]}
  - {name: k-large, kind: large_image, api: kserve, priority: 3, image_size: [800, 600], image_format: png}
  - {name: k-both, kind: text+image, api: kserve, deadline_ms: 10000}
  - {name: o-text, kind: text, api: openai, encoding_format: base64}
  - {name: o-image, kind: image, api: openai, images: [$images/tiny.jpg, $images/logo.png]}
  - {name: o-large, kind: large_image, api: openai, image_size: [1024, 768], image_format: jpeg}
  - {name: o-both, kind: text+image, api: openai, priority: 1}
EOF
  "$MMSERVE" bench --url "$URL" --api-key bench-key --model "$MODEL" --profile "$TMP/profile.yaml" --rate 24 \
    --duration 4 --json-file "$out" || fail "mmserve bench (every kind)"
  "$PY" - "$out" <<'PY' || fail "every-kind report"
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["classes"]:
    assert c["sent"] > 0, f"class {c['name']} never sent (seeded run; raise the rate)"
    bad = (c["errors"], c["transport_errors"], c["rejected_429"])
    assert c["ok"] == c["sent"], f"class {c['name']}: {c['ok']} ok of {c['sent']}: {bad}"
PY
  # 3. Open loop: one connection, arrivals far faster than one request's latency -> counted client drops.
  "$MMSERVE" bench --url "$URL" --api-key bench-key --rate 400 --duration 2 --connections 1 --output json \
    >"$out" || fail "mmserve bench (drops)"
  "$PY" - "$out" <<'PY' || fail "drop accounting"
import json, sys
o = json.load(open(sys.argv[1]))["overall"]
print({k: o[k] for k in ("arrivals", "sent", "ok", "dropped_by_client")})
assert o["dropped_by_client"] > 0 and o["ok"] > 0 and o["sent"] + o["dropped_by_client"] == o["arrivals"], o
assert o["arrivals"] > 400, o  # ~800 expected: arrivals do not wait for answers
PY
  # 4. Counts: every request sent is counted ok at a rate the server holds; a wrong model name's 404s are
  # counted as errors (and the run fails: nothing succeeded).
  printf 'classes:\n  - {name: img, kind: image, api: kserve, image_size: [224, 224], image_format: png}\n' \
    >"$TMP/img.yaml"
  "$MMSERVE" bench --url "$URL" --api-key bench-key --model "$MODEL" --profile "$TMP/img.yaml" --rate 10 \
    --duration 3 --connections 8 --output json >"$out" || fail "mmserve bench (counts)"
  "$PY" - "$out" <<'PY' || fail "counts"
import json, sys
o = json.load(open(sys.argv[1]))["overall"]
print({k: o[k] for k in ("arrivals", "sent", "ok", "dropped_by_client", "errors", "transport_errors")})
assert o["sent"] > 10 and o["ok"] == o["sent"] == o["arrivals"], o
assert not o["errors"] and not o["transport_errors"] and o["rejected_429"] == 0, o
PY
  local rc=0
  "$MMSERVE" bench --url "$URL" --api-key bench-key --model no-such-model --profile "$TMP/img.yaml" --rate 10 \
    --duration 2 --connections 4 --json-file "$out" >/dev/null 2>"$TMP/bench.err" || rc=$?
  [ "$rc" = 1 ] || fail "bench against a wrong model exited $rc, not 1"
  grep -q "no request succeeded" "$TMP/bench.err" || fail "unclear message: $(cat "$TMP/bench.err")"
  "$PY" - "$out" <<'PY' || fail "wrong model's errors"
import json, sys
o = json.load(open(sys.argv[1]))["overall"]
print({k: o[k] for k in ("sent", "ok", "errors", "transport_errors")})
assert o["sent"] > 5 and o["ok"] == 0 and o["errors"] == {"404": o["sent"]} and not o["transport_errors"], o
PY
  # 5. Usage errors: exit 1 with a message, quickly.
  local err
  err=$("$MMSERVE" bench --url "$URL" --duration 1 2>&1 >/dev/null) && fail "bench without the API key succeeded"
  grep -q "401" <<<"$err" || fail "no 401 in: $err"
  printf 'classes:\n  - {name: a, kind: audio}\n' >"$TMP/bad.yaml"
  err=$("$MMSERVE" bench --url "$URL" --profile "$TMP/bad.yaml" 2>&1 >/dev/null) && fail "bad profile accepted"
  grep -q "kind must be" <<<"$err" || fail "unclear profile error: $err"
  local closed
  closed=$(free_port)
  err=$(timeout 20 "$MMSERVE" bench --url "http://127.0.0.1:$closed" --duration 1 2>&1 >/dev/null) \
    && fail "bench against a closed port succeeded"
  grep -q "not reachable\|not ready" <<<"$err" || fail "unclear connection error: $err"
}

run_bench_wire() {
  "$PY" "$SRC/tests/e2e/bench_wire_server.py" "$TMP/wire.port" "$TMP/wire.log" >"$TMP/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do [ -s "$TMP/wire.port" ] && break; sleep 0.1; done
  [ -s "$TMP/wire.port" ] || fail "bench_wire_server.py did not start"
  URL=http://127.0.0.1:$(cat "$TMP/wire.port")
  local profile='classes:\n  - {name: img, kind: image, api: kserve, priority: 2, deadline_ms: 900, image_size: [32, 32]}\n'
  printf "timeout_s: 1\n$profile" >"$TMP/wire.yaml"
  printf "timeout_s: 1\nkeep_alive: false\n$profile" >"$TMP/wire-noka.yaml"
  local model rc
  for model in length chunked eof continue http10 error garbage idle hang "a b,é" length-noka; do
    local yaml=$TMP/wire.yaml
    [ "$model" = length-noka ] && yaml=$TMP/wire-noka.yaml
    rc=0
    timeout 30 "$MMSERVE" bench --url "$URL" --api-key wire-key --model "$model" --profile "$yaml" --rate 10 \
      --duration 1.5 --connections 2 --seed 5 --json-file "$TMP/wire-${model// /_}.json" >/dev/null \
      2>"$TMP/wire.err" || rc=$?
    echo "$model: exit $rc" >>"$TMP/wire.rc"
  done
  "$PY" - "$TMP" <<'PY' || fail "bench-wire"
import collections, json, sys
tmp = sys.argv[1]
rc = dict(line.rsplit(": exit ", 1) for line in open(f"{tmp}/wire.rc").read().splitlines())
log = [json.loads(line) for line in open(f"{tmp}/wire.log")]
by_model = collections.defaultdict(list)
for r in log:
    by_model[r["model"]].append(r)
def report(model):
    return json.load(open(f"{tmp}/wire-{model.replace(' ', '_')}.json"))["overall"]
# What cpp-httplib 0.11.4's Client::Post sent (captured before the bench got its own client).
def golden(model, n, close):
    return ("POST /v2/models/%s/infer HTTP/1.1\r\nAccept: application/json\r\nAuthorization: Bearer wire-key\r\n"
            "%sContent-Length: %d\r\nContent-Type: application/json\r\nHost: 127.0.0.1:PORT\r\n"
            "User-Agent: cpp-httplib/0.11.4\r\nx-mmserve-priority: 2\r\nx-mmserve-timeout-ms: 900\r\n\r\n"
            % (model, "Connection: close\r\n" if close else "", n))
for r in log:
    assert r["head"] == golden(r["model"], r["body_bytes"], r["model"] == "length-noka"), r
    assert r["body_json"] and r["body_bytes"] > 100, r
wire_name = {"a b,é": "a%20b%2C%C3%A9"}
for model in ["length", "chunked", "eof", "continue", "http10", "idle", "a b,é", "length-noka"]:
    o, seen = report(model), by_model[wire_name.get(model, model)]
    print(model, {k: o[k] for k in ("sent", "ok", "errors", "transport_errors")}, len({r["conn"] for r in seen}), "conns")
    assert rc[model] == "0" and o["sent"] > 5 and o["ok"] == o["sent"] == len(seen), (model, rc[model], o, len(seen))
    conns = len({r["conn"] for r in seen})
    if model in ("eof", "http10", "length-noka"):
        assert conns == len(seen), f"{model}: {conns} connections for {len(seen)} requests"
    elif model != "idle":
        assert conns <= 2, f"{model}: {conns} connections for {len(seen)} requests (no keep-alive)"
for model, kind in (("error", "errors"), ("garbage", "transport_errors"), ("hang", "transport_errors")):
    o = report(model)
    print(model, {k: o[k] for k in ("sent", "ok", "errors", "transport_errors", "cut_at_drain") if k in o})
    want = {"503": o["sent"]} if model == "error" else {"read": o["sent"]}
    sent_min = 2 if model == "hang" else 5  # each hung request holds one of the 2 connections for timeout_s
    assert rc[model] == "1" and o["sent"] >= sent_min and o["ok"] == 0 and o[kind] == want, (model, rc[model], o)
    assert o["sent"] == len(by_model[model]), (model, o["sent"], len(by_model[model]))
PY
}

run_bench_generate() {
  "$MMSERVE" convert-llama2c --checkpoint "$SRC/assets/llama2c/stories260K.bin" \
    --tokenizer "$SRC/assets/llama2c/tok512.bin" --output "$TMP/models/stories" 2>/dev/null \
    || fail "convert-llama2c failed"
  start_server --api-key bench-key
  local out=$TMP/bench.json
  # 1. Closed loop: 2 clients for 3 s, random-id prompts of 8..24 tokens after a shared 16-token prefix.
  "$MMSERVE" bench --url "$URL" --api-key bench-key --model stories --generate --concurrency 2 --duration 3 \
    --prompt-tokens 8:24 --prefix-tokens 16 --max-tokens 8:16 --seed 3 --json-file "$out" >/dev/null \
    || fail "mmserve bench --generate (closed loop)"
  "$PY" - "$out" <<'PY' || fail "closed-loop generate report"
import json, sys
r = json.load(open(sys.argv[1]))
o = r["overall"]
print({k: o[k] for k in ("arrivals", "sent", "ok", "output_tokens", "output_tokens_per_s")}, o["ttft_ms"], o["itl_ms"])
assert r["config"]["profile"] == "generate" and r["config"]["mode"] == "closed_loop", r["config"]
assert r["classes"][0]["name"] == "generate" and r["classes"][0]["ok"] == o["ok"]
assert o["ok"] > 2 and o["ok"] == o["sent"] and o["http_5xx"] == 0 and not o["errors"] and not o["transport_errors"], o
assert o["sent"] + o["dropped_by_client"] == o["arrivals"], o
assert o["outputs_shorter_than_asked"] == 0, o  # ignore_eos: every request generated its max_tokens
assert 8 * o["ok"] <= o["output_tokens"] <= 16 * o["ok"], o
assert o["prompt_tokens"] >= 24 * o["ok"], o  # 16 shared + at least 8
assert o["output_tokens_per_s"] > 0 and o["throughput_ok_per_s"] > 0, o
for key in ("latency_ms", "ttft_ms", "itl_ms", "tpot_ms"):
    s = o[key]
    assert 0 <= s["p50"] <= s["p90"] <= s["p99"] <= s["max"], (key, s)
    assert s["max"] > 0, (key, s)
assert 0 < o["ttft_ms"]["p50"] <= o["latency_ms"]["p50"], o
PY
  # 2. Open loop: Poisson arrivals at 8/s for 2 s with one text prompt.
  "$MMSERVE" bench --url "$URL" --api-key bench-key --model stories --generate --rate 8 --duration 2 \
    --prompt "Once upon a time" --max-tokens 12 --output json >"$out" || fail "mmserve bench --generate (open loop)"
  "$PY" - "$out" <<'PY' || fail "open-loop generate report"
import json, sys
r = json.load(open(sys.argv[1]))
o = r["overall"]
print({k: o[k] for k in ("arrivals", "sent", "ok", "dropped_by_client", "output_tokens")})
assert r["config"]["mode"] == "open_loop", r["config"]
assert o["arrivals"] > 3 and o["ok"] == o["sent"] and o["sent"] + o["dropped_by_client"] == o["arrivals"], o
assert o["output_tokens"] == 12 * o["ok"] and o["prompt_tokens"] == 5 * o["ok"], o
assert 0 < o["ttft_ms"]["p50"] <= o["ttft_ms"]["p99"] and 0 < o["latency_ms"]["p50"] <= o["latency_ms"]["p99"], o
PY
  # 3. Usage errors: exit 1 naming the flag.
  local err
  err=$("$MMSERVE" bench --url "$URL" --api-key bench-key --generate --concurrency 1 --max-tokens 5:2 2>&1 >/dev/null) \
    && fail "a reversed --max-tokens range was accepted"
  grep -q "max-tokens" <<<"$err" || fail "unclear range error: $err"
  err=$("$MMSERVE" bench --url "$URL" --api-key bench-key --generate --concurrency 1 --prompt x --prefix-tokens 4 \
    2>&1 >/dev/null) && fail "--prefix-tokens with --prompt was accepted"
  grep -q "prefix-tokens" <<<"$err" || fail "unclear prefix error: $err"
}

case "$MODE" in
  openai) run_openai ;;
  openai-audio) run_openai_audio ;;
  openai-completions) run_openai_completions ;;
  prometheus) run_prometheus ;;
  locust) run_locust ;;
  bench) run_bench ;;
  bench-wire) run_bench_wire ;;
  bench-generate) run_bench_generate ;;
  *) fail "unknown mode $MODE" ;;
esac
echo "PASS: $MODE"
