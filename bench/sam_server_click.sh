#!/usr/bin/env bash
# bench/sam_server_click.sh BIN_DIR: a click on a cached image through the server (issue 13: <= 5 ms P50 on localhost): SAM ViT-B (HF random weights,
# saved by bench/hf_sam_gpu.py) served on cuda, one image by data URL, then 50 clicks by image_id, timed client-side.
set -u
M=/tmp/samrepo/sam-vit-b
mkdir -p /tmp/samrepo
python3 bench/hf_sam_gpu.py --arch vit-b --save "$M" > /tmp/save.log 2>&1 || { tail -5 /tmp/save.log; exit 1; }
printf 'device: cuda\nmax_batch_size: 8\nmax_queue_delay_ms: 0\n' > "$M/mmserve.yaml"
[ -f "$M/preprocessor_config.json" ] || printf '{"size": {"longest_edge": 1024}, "pad_size": {"height": 1024, "width": 1024}, "do_resize": true, "do_rescale": true, "do_normalize": true, "do_pad": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "rescale_factor": 0.00392156862745098, "resample": 2}' > "$M/preprocessor_config.json"
"${1:-/tmp/b}"/mmserve serve --model-repository /tmp/samrepo --port 8611 > /tmp/samserve.log 2>&1 &
PID=$!
for i in $(seq 1 120); do curl -sf localhost:8611/v2/health/ready >/dev/null && break; sleep 0.5; done
python3 - <<'PY'
import base64, json, time, statistics, requests
img = base64.b64encode(open("tests/fixtures/images/rocket.jpg", "rb").read()).decode()
s = requests.Session()
r = s.post("http://localhost:8611/v1/segment", json={"model": "sam-vit-b", "image": "data:image/jpeg;base64," + img, "points": [[400, 180]]})
first = r.json(); json.dump(first, open("/tmp/sam_first.json", "w")); print("first", r.status_code, first.get("embedding_cached"), r.headers.get("Server-Timing"))
lat, compute, sizes = [], [], []
def timing(header, name):  # Server-Timing: "queue;dur=0.08, compute;dur=7.9, ..."
    for part in (header or "").split(","):
        fields = part.strip().split(";")
        if fields[0] == name:
            return float(fields[1].split("=")[1])
    return None
for i in range(60):
    t = time.perf_counter()
    r = s.post("http://localhost:8611/v1/segment", json={"model": "sam-vit-b", "image_id": first["image_id"], "points": [[300 + i, 200]], "multimask_output": True})
    lat.append((time.perf_counter() - t) * 1000)
    compute.append(timing(r.headers.get("Server-Timing"), "compute"))
    sizes.append(len(r.content))
    assert r.status_code == 200 and r.json()["embedding_cached"], r.text[:300]
lat, compute = lat[10:], [c for c in compute[10:] if c is not None]
print(json.dumps({"clicks": len(lat), "p50_ms": statistics.median(lat), "p90_ms": sorted(lat)[int(0.9 * len(lat))],
                  "compute_p50_ms": statistics.median(compute) if compute else None,
                  "response_bytes_p50": statistics.median(sizes),
                  "server_timing_last": r.headers.get("Server-Timing")}))
PY
# The same clicks from curl (one keep-alive connection, 60 requests, the first 10 dropped): the client's own cost
# (Python requests spends ~2-5 ms of its own per call) left out.
ID=$(python3 -c 'import json; print(json.load(open("/tmp/sam_first.json"))["image_id"])')
args=()
for i in $(seq 1 60); do
  args+=(-s -o /dev/null -w '%{time_total}\n' -H 'content-type: application/json'
         -d "{\"model\":\"sam-vit-b\",\"image_id\":\"$ID\",\"points\":[[$((300 + i)),200]]}" http://localhost:8611/v1/segment --next)
done
curl "${args[@]}" -s -o /dev/null http://localhost:8611/v2/health/ready | tail -n +11 | sort -n |
  awk '{a[NR]=$1*1000} END {printf "{\"curl_clicks\": %d, \"curl_p50_ms\": %.3f, \"curl_p90_ms\": %.3f}\n", NR, a[int((NR+1)/2)], a[int(NR*0.9)]}'
kill $PID; tail -3 /tmp/samserve.log
