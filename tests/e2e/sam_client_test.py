#!/usr/bin/env python3
"""SAM end to end with real clients, against HF's goldens (tests/fixtures/sam/sam-tiny-win-f32/golden.json, made by
tools/reference/make_sam_fixtures.py): the `mmserve segment` CLI, `curl` and Python `requests` on POST /v1/segment,
and a KServe v2 infer with point tensors.

It starts `mmserve serve` on a free port with a copy of the tiny SAM model and checks, for golden cases:
  1. `mmserve segment --point/--box [--single-mask]` prints HF's IoU scores (1e-4 relative) and masks whose COCO RLE
     decodes to >= 99.9% of HF's pixels;
  2. curl: /v1/segment with a data URL image; the response's image_id then serves a second prompt without the image
     (embedding_cached true, the cache hit counter moves in /metrics), and "output": "png" gives PNG masks;
  3. requests: KServe infer (image BYTES base64, point_coords FP32 [N, 2], point_labels INT32 [N]) -> iou_scores
     and masks (RLE JSON strings) equal to HF;
  4. bad prompts (a point outside the image, an unknown image_id, malformed JSON, a wrong shape) -> 400 with a JSON
     message, and the server still answers afterwards; SIGTERM -> exit 0.
Usage: sam_client_test.py --binary build/.../mmserve --fixtures tests/fixtures
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

MODEL = "sam"


def decode_rle(counts, height, width):
    """pycocotools' compressed RLE string (maskApi.c rleFrString) -> a row-major list of 0/1 of height x width."""
    runs, i = [], 0
    while i < len(counts):
        x, k, more = 0, 0, True
        while more:
            c = ord(counts[i]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            i += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(runs) > 2:
            x += runs[-2]
        runs.append(x)
    column_major, value = [], 0
    for r in runs:
        column_major.extend([value] * r)
        value = 1 - value
    assert len(column_major) == height * width, (len(column_major), height, width)
    return [column_major[x * height + y] for y in range(height) for x in range(width)]


def check_masks(masks, case):
    assert len(masks) == len(case["coco_rle"]), (len(masks), len(case["coco_rle"]))
    for got, ref in zip(masks, case["coco_rle"]):
        assert got["size"] == ref["size"], (got["size"], ref["size"])
        h, w = ref["size"]
        a, b = decode_rle(got["counts"], h, w), decode_rle(ref["counts"], h, w)
        agreement = sum(x == y for x, y in zip(a, b)) / float(h * w)
        assert agreement >= 0.999, "%s: %.5f of the pixels equal HF's" % (case["name"], agreement)


def check_iou(got, case):
    ref = case["iou_scores"]
    scale = max(abs(v) for v in ref)
    err = max(abs(a - b) for a, b in zip(got, ref)) / scale
    assert len(got) == len(ref) and err <= 1e-4, (case["name"], got, ref, err)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_cases(binary, model_dir, images, cases):
    for case in cases:
        if case["has_input_masks"]:
            continue  # the CLI takes points and a box
        cmd = [binary, "segment", "--model", model_dir, "--image", os.path.join(images, case["image"])]
        for (x, y), label in zip(case.get("input_points", [[]])[0], case.get("input_labels", [[]])[0]):
            cmd += ["--point", "%r,%r,%d" % (x, y, label)]
        if "input_boxes" in case:
            cmd += ["--box", ",".join(repr(v) for v in case["input_boxes"][0][0])]
        if not case["multimask_output"]:
            cmd.append("--single-mask")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (cmd, out.stderr)
        result = json.loads(out.stdout)
        assert set(result) == {"iou_scores", "masks"}, result.keys()
        check_iou(result["iou_scores"], case)
        check_masks(result["masks"], case)
    bad = subprocess.run([binary, "segment", "--model", model_dir, "--image", os.path.join(images, "rocket.jpg"),
                          "--point", "9999,1,1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "outside the 640x427 image" in bad.stderr, (bad.returncode, bad.stderr)


def data_url(path):
    kind = "png" if path.endswith(".png") else "jpeg"
    return "data:image/%s;base64,%s" % (kind, base64.b64encode(open(path, "rb").read()).decode())


def curl_json(url, body):
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "--data-binary",
                          "@-", url], input=json.dumps(body), capture_output=True, text=True, timeout=60)
    text, _, code = out.stdout.rpartition("\n")
    return int(code), json.loads(text)


def http_cases(base, images, cases):
    rocket = next(c for c in cases if c["name"] == "rocket_point")
    neg = next(c for c in cases if c["name"] == "rocket_points_neg")
    code, out = curl_json(base + "/v1/segment", {
        "model": MODEL, "image": data_url(os.path.join(images, "rocket.jpg")),
        "points": rocket["input_points"][0], "labels": rocket["input_labels"][0]})
    assert code == 200, (code, out)
    check_iou(out["iou_scores"], rocket)
    check_masks(out["masks"], rocket)
    assert out["embedding_cached"] is False
    image_id = out["image_id"]
    # A second click by image_id: no image sent, the encoder skipped.
    code, out = curl_json(base + "/v1/segment", {
        "model": MODEL, "image_id": image_id, "points": neg["input_points"][0], "labels": neg["input_labels"][0],
        "multimask_output": False})
    assert code == 200, (code, out)
    assert out["embedding_cached"] is True and out["image_id"] == image_id
    check_iou(out["iou_scores"], neg)
    check_masks(out["masks"], neg)
    metrics = requests.get(base + "/metrics", timeout=10).text
    assert 'mmserve_cache_hits_total{model="sam",cache="image_embedding"} 1' in metrics, metrics[-2000:]
    # PNG masks.
    r = requests.post(base + "/v1/segment", json={"model": MODEL, "image_id": image_id, "points": [[400, 180]],
                                                  "output": "png"}, timeout=60)
    assert r.status_code == 200, r.text
    png = base64.b64decode(r.json()["masks"][0]["png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and r.json()["masks"][0]["size"] == [427, 640]
    # KServe v2 with Python requests: point tensors, RLE strings out.
    box = next(c for c in cases if c["name"] == "logo_box_points")
    body = {"inputs": [
        {"name": "image", "datatype": "BYTES", "shape": [1],
         "data": [base64.b64encode(open(os.path.join(images, box["image"]), "rb").read()).decode()]},
        {"name": "point_coords", "datatype": "FP32", "shape": [2, 2],
         "data": [v for p in box["input_points"][0] for v in p]},
        {"name": "point_labels", "datatype": "INT32", "shape": [2], "data": box["input_labels"][0]},
        {"name": "boxes", "datatype": "FP32", "shape": [1, 4], "data": box["input_boxes"][0][0]}]}
    r = requests.post(base + "/v2/models/%s/infer" % MODEL, json=body, timeout=60)
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    check_iou(outputs["iou_scores"]["data"], box)
    check_masks([json.loads(m) for m in outputs["masks"]["data"]], box)
    assert outputs["image_id"]["data"][0]
    meta = requests.get(base + "/v2/models/%s" % MODEL, timeout=10).json()
    assert meta["platform"] == "mmserve_sam", meta
    # Bad prompts: 400 with a message; the server lives on.
    for bad, needle in [
        ({"model": MODEL, "image_id": image_id, "points": [[9999, 1]]}, "outside the 640x427 image"),
        ({"model": MODEL, "image_id": "f" * 32, "points": [[1, 1]]}, "unknown image_id"),
        ({"model": MODEL, "image_id": image_id, "points": [[1, 2, 3]]}, "points[0]"),
        ({"model": MODEL, "image_id": image_id}, "the prompt is empty"),
        ({"model": MODEL, "image_id": image_id, "labels": [1]}, "point_labels without point_coords"),
        ({"model": MODEL, "image": "data:image/png;base64,AAAA", "points": [[1, 1]]}, "image"),
    ]:
        r = requests.post(base + "/v1/segment", json=bad, timeout=60)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], (bad, r.status_code, r.text)
    r = requests.post(base + "/v1/segment", data="{not json", headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    assert requests.get(base + "/v2/health/ready", timeout=10).status_code == 200


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    model_dir = os.path.join(args.fixtures, "sam", "sam-tiny-win-f32")
    images = os.path.join(args.fixtures, "images")
    cases = json.load(open(os.path.join(model_dir, "golden.json")))["cases"]
    cli_cases(args.binary, model_dir, images, cases)
    root = tempfile.mkdtemp(prefix="mmserve_sam_client_")
    os.makedirs(os.path.join(root, "repo", MODEL))
    for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
        shutil.copy(os.path.join(model_dir, f), os.path.join(root, "repo", MODEL, f))
    port = free_port()
    base = "http://127.0.0.1:%d" % port
    err = open(os.path.join(root, "stderr"), "w+")
    server = subprocess.Popen([args.binary, "serve", "--model-repository", os.path.join(root, "repo"),
                               "--port", str(port)], stderr=err)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if requests.get(base + "/v2/health/ready", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if server.poll() is not None or time.time() > deadline:
                err.seek(0)
                raise SystemExit("server did not become ready:\n" + err.read())
            time.sleep(0.1)
        http_cases(base, images, cases)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        print("sam_client_test: OK (CLI, curl, requests, KServe match HF's goldens; bad prompts are 400)")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
