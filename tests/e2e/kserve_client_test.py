#!/usr/bin/env python3
"""A KServe v2 client written only with Python's standard library (urllib), as a third party would write one.

It starts `mmserve serve` itself (a copy of tests/fixtures/clip-tiny-quickgelu-f32 in a temporary repository,
a free port), waits for /v2/health/ready, and checks inference two ways against HF's goldens
(golden.safetensors, read here without numpy) within 1e-4:
  1. JSON tensors: texts as BYTES strings, images as base64 BYTES;
  2. the binary tensor data extension: BYTES elements as 4-byte little-endian length + bytes, outputs as raw
     little-endian FP32 after the JSON header (Inference-Header-Content-Length).
Then it sends SIGTERM and expects exit code 0. Registered with CTest in tests/e2e/server_tests.cmake.
Usage: kserve_client_test.py --binary build/.../mmserve --fixtures tests/fixtures
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

MODEL = "clip-tiny"
TEXTS = ["a photo of a cat", ""]
IMAGES = ["rocket.jpg", "chelsea.png"]


def read_safetensors(path):
    """{name: (shape, [floats])} for the F32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        out[name] = (info["shape"], list(values))
    return out


def relative_error(got, ref):
    max_diff = max(abs(a - b) for a, b in zip(got, ref))
    max_ref = max(abs(b) for b in ref)
    return max_diff / max_ref if max_ref else max_diff


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url, body=None, headers=None, timeout=60):
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def check_rows(name, got, golden, rows, dim):
    _, ref = golden[name]
    assert len(got) == rows * dim, (name, len(got))
    for r in range(rows):
        err = relative_error(got[r * dim:(r + 1) * dim], ref[r * dim:(r + 1) * dim])
        assert err <= 1e-4, "%s row %d: relative error %g" % (name, r, err)


def json_infer(base, fixtures, golden, dim):
    images = [base64.b64encode(open(os.path.join(fixtures, "images", i), "rb").read()).decode() for i in IMAGES]
    body = {
        "id": "py-json",
        "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [len(TEXTS)], "data": TEXTS},
            {"name": "image", "datatype": "BYTES", "shape": [len(images)], "data": images},
        ],
        "outputs": [{"name": "text_embeds"}, {"name": "image_embeds"}],
    }
    status, headers, data = request(base + "/v2/models/%s/infer" % MODEL, json.dumps(body).encode(),
                                    {"Content-Type": "application/json"})
    assert status == 200, (status, data[:500])
    out = json.loads(data)
    assert out["model_name"] == MODEL and out["id"] == "py-json", out
    tensors = {o["name"]: o for o in out["outputs"]}
    assert tensors["text_embeds"]["shape"] == [2, dim]
    check_rows("text_embeds", tensors["text_embeds"]["data"], golden, 2, dim)
    check_rows("image_embeds", tensors["image_embeds"]["data"], golden, 2, dim)
    assert "traceparent" in {k.lower() for k in headers}, headers
    assert "total;dur=" in headers.get("Server-Timing", ""), headers


def binary_infer(base, fixtures, golden, dim):
    def bytes_tensor(elements):
        return b"".join(struct.pack("<I", len(e)) + e for e in elements)

    texts = bytes_tensor([t.encode("utf-8") for t in TEXTS])
    images = bytes_tensor([open(os.path.join(fixtures, "images", i), "rb").read() for i in IMAGES])
    header = json.dumps({
        "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": len(texts)}},
            {"name": "image", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": len(images)}},
        ],
        "outputs": [
            {"name": "text_embeds", "parameters": {"binary_data": True}},
            {"name": "image_embeds", "parameters": {"binary_data": True}},
            {"name": "logits_per_image", "parameters": {"binary_data": False}},
        ],
    }).encode()
    status, headers, data = request(base + "/v2/models/%s/infer" % MODEL, header + texts + images, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    })
    assert status == 200, (status, data[:500])
    length = int(headers["Inference-Header-Content-Length"])
    out = json.loads(data[:length])
    offset = length
    for o in out["outputs"]:
        if "parameters" in o and "binary_data_size" in o["parameters"]:
            size = o["parameters"]["binary_data_size"]
            values = list(struct.unpack("<%df" % (size // 4), data[offset:offset + size]))
            offset += size
            check_rows(o["name"], values, golden, 2, dim)
        else:
            assert o["name"] == "logits_per_image" and o["shape"] == [2, 2], o
            ref = golden["logits_per_image"][1]
            assert relative_error(o["data"], [ref[0], ref[1], ref[8], ref[9]]) <= 1e-4, o["data"]
    assert offset == len(data), (offset, len(data))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    fixture = os.path.join(args.fixtures, "clip-tiny-quickgelu-f32")
    golden = read_safetensors(os.path.join(fixture, "golden.safetensors"))
    dim = golden["text_embeds"][0][1]
    root = tempfile.mkdtemp(prefix="mmserve_py_client_")
    # symlinks=False (the default) copies what links point to: tokenizer.json is a relative link in the fixture.
    shutil.copytree(fixture, os.path.join(root, "repo", MODEL), symlinks=False)
    port = free_port()
    base = "http://127.0.0.1:%d" % port
    err = open(os.path.join(root, "stderr"), "w+")
    server = subprocess.Popen([args.binary, "serve", "--model-repository", os.path.join(root, "repo"),
                               "--port", str(port)], stderr=err)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if request(base + "/v2/health/ready", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                err.seek(0)
                raise SystemExit("server did not become ready:\n" + err.read())
            time.sleep(0.1)
        json_infer(base, args.fixtures, golden, dim)
        binary_infer(base, args.fixtures, golden, dim)
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        assert code == 0, "exit code %d" % code
        print("kserve_client_test: OK (JSON and binary tensor data match the goldens)")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
