# Shared helpers of the server benchmarks (bench/server_batching.sh, server_priority.sh, server_overload.sh):
# build a model repository from the built-in demo CLIP with a given mmserve.yaml, start `mmserve serve` on a
# free loopback port and wait until ready, sample its RSS from /proc, run `mmserve bench` into OUT, stop the
# server. Sourced, not run: the caller sets MMSERVE (the binary), ROOT (the repository) and OUT (the result
# directory), and calls srv_cleanup from its EXIT trap. Exercised by running the three scripts. MMSERVE_CLIENT,
# when set, is the `mmserve` that runs the load (an older server measured with the newer load generator).

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
SRV_PID=""
SRV_URL=""
RSS_PID=""

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# make_model REPO NAME ARCH YAML_TEXT: a demo CLIP (random weights, real tokenizer; ARCH small = the demo,
# vit-b32 = ViT-B/32's shapes) as REPO/NAME with that mmserve.yaml.
make_model() {
  "$MMSERVE" demo-model --overwrite --architecture "$3" --output "$1/$2" >"$OUT/demo_model_$2.log" 2>&1 || {
    echo "mmserve demo-model failed:" >&2
    cat "$OUT/demo_model_$2.log" >&2
    exit 1
  }
  printf '%s\n' "$4" >"$1/$2/mmserve.yaml"
}

# srv_start LOGNAME REPO [serve flags...]: sets SRV_PID and SRV_URL; exits if not ready within 120 s.
srv_start() {
  local log=$OUT/$1.server.log repo=$2 port
  shift 2
  port=$(free_port)
  SRV_URL=http://127.0.0.1:$port
  "$MMSERVE" serve --model-repository "$repo" --host 127.0.0.1 --port "$port" --access-log /dev/null "$@" \
    >"$log" 2>&1 &
  SRV_PID=$!
  for _ in $(seq 1 1200); do
    if ! kill -0 "$SRV_PID" 2>/dev/null; then echo "server exited; see $log" >&2; tail -n 20 "$log" >&2; exit 1; fi
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$SRV_URL/v2/health/ready" || true)" = 200 ] && return 0
    sleep 0.1
  done
  echo "server not ready after 120 s; see $log" >&2
  exit 1
}

srv_stop() {
  [ -n "$RSS_PID" ] && { kill "$RSS_PID" 2>/dev/null || true; wait "$RSS_PID" 2>/dev/null || true; RSS_PID=""; }
  [ -n "$SRV_PID" ] || return 0
  kill -TERM "$SRV_PID" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" 2>/dev/null || true
  SRV_PID=""
}

srv_cleanup() { srv_stop; }

# rss_start FILE: samples the server's VmRSS (kB) every 0.5 s as "epoch_seconds kB" lines until srv_stop.
rss_start() {
  local file=$1 pid=$SRV_PID
  (
    while [ -r "/proc/$pid/status" ]; do
      kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
      [ -n "$kb" ] && echo "$EPOCHREALTIME $kb"
      sleep 0.5
    done
  ) >"$file" &
  RSS_PID=$!
}

# bench_run NAME [mmserve bench flags...]: runs `mmserve bench` against SRV_URL into OUT/NAME.json and .txt;
# exits with its messages if it fails.
bench_run() {
  local name=$1
  shift
  "${MMSERVE_CLIENT:-$MMSERVE}" bench --url "$SRV_URL" --json-file "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err" || {
    echo "mmserve bench $name failed:" >&2
    cat "$OUT/$name.err" "$OUT/$name.txt" >&2
    exit 1
  }
}

# The commit the figures belong to (with "+dirty" for uncommitted changes) and the host, for the JSON.
commit_id() {
  local c
  c=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || c="$c+dirty"
  echo "$c"
}
host_desc() { echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"; }
