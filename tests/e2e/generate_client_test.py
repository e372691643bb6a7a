#!/usr/bin/env python3
"""The generation routes with Python `requests` (Debian's python3-requests) against the real stories260K.

It converts llama2.c's stories260K with `mmserve convert-llama2c`, starts `mmserve serve` on a free port with it
and checks:
  1. KServe generate (`POST /v2/models/stories/generate`): Triton's body (text_input, fields at the top level and in
     parameters) gives llama2.c's greedy story, as /v1/completions does; generate_stream's events (read with
     iter_lines) add up to the same text and end with finish_reason and the counts;
  2. /v1/completions with logprobs and n (greedy: every choice is the same story and every step's token is its
     top_logprobs' first), streamed n choices each ending once;
  3. malformed bodies -> 400 with a JSON message naming the field, unknown model -> 404, in KServe's shape;
  4. a tiny HF LLaVA (tests/fixtures/llava + llava_servable): KServe generate with an image data URL gives the
     tokens of a chat with the same image as an image_url part; a placeholder without its image is a 400;
     SIGTERM -> exit 0.
Usage: generate_client_test.py --binary build/.../mmserve --source-dir .
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

MODEL = "stories"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sse(response):
    """The JSON payloads of a server-sent event stream (stops at [DONE])."""
    out = []
    for line in response.iter_lines(decode_unicode=True):
        if not line:
            continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]":
            out.append("[DONE]")
            continue
        out.append(json.loads(line[6:]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mmserve-generate-")
    server = None
    try:
        models = os.path.join(tmp, "models")
        src = args.source_dir
        subprocess.run([args.binary, "convert-llama2c", "--checkpoint", f"{src}/assets/llama2c/stories260K.bin",
                        "--tokenizer", f"{src}/assets/llama2c/tok512.bin", "--output", f"{models}/{MODEL}"],
                       check=True, stderr=subprocess.DEVNULL)
        llava = os.path.join(models, "llava")
        os.makedirs(llava)
        for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
            shutil.copy(f"{src}/tests/fixtures/llava/llava-llama-f32/{f}", llava)
        for f in ("tokenizer.json", "chat_template.jinja"):
            shutil.copy(f"{src}/tests/fixtures/llava_servable/{f}", llava)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "server.log"), "w")
        server = subprocess.Popen([args.binary, "serve", "--model-repository", models, "--port", str(port)],
                                  stderr=log, stdout=log)
        for _ in range(600):
            try:
                if requests.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the server was not ready within 60 s")
        golden = open(f"{src}/tests/fixtures/llama2c/stories260K_golden_t0.txt").read()

        # 1. KServe generate, whole and streamed.
        body = {"text_input": "Once upon a time", "max_tokens": 30, "parameters": {"temperature": 0}}
        r = requests.post(f"{url}/v2/models/{MODEL}/generate", json=body, timeout=60)
        assert r.status_code == 200, r.text
        g = r.json()
        assert set(g) == {"model_name", "model_version", "text_output", "finish_reason", "prompt_tokens",
                          "completion_tokens"}, g
        assert g["model_name"] == MODEL and g["model_version"] == "1", g
        assert golden.startswith("Once upon a time" + g["text_output"]), g["text_output"]
        assert g["completion_tokens"] == 30 and g["finish_reason"] == "length", g
        c = requests.post(f"{url}/v1/completions", timeout=60,
                          json={"model": MODEL, "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0})
        assert c.json()["choices"][0]["text"] == g["text_output"], c.text
        with requests.post(f"{url}/v2/models/{MODEL}/generate_stream", json=body, stream=True, timeout=60) as s:
            assert s.status_code == 200 and s.headers["Content-Type"].startswith("text/event-stream"), s.text
            events = sse(s)
        assert len(events) > 3, events
        assert "".join(e["text_output"] for e in events) == g["text_output"], events
        assert events[-1]["finish_reason"] == "length" and events[-1]["completion_tokens"] == 30, events[-1]

        # 2. Completions with logprobs and n.
        r = requests.post(f"{url}/v1/completions", timeout=60,
                          json={"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
                                "n": 2, "logprobs": 3})
        assert r.status_code == 200, r.text
        j = r.json()
        assert [ch["index"] for ch in j["choices"]] == [0, 1], j
        assert j["usage"] == {"prompt_tokens": 5, "completion_tokens": 24, "total_tokens": 29}, j["usage"]
        for ch in j["choices"]:
            assert ch["text"] == j["choices"][0]["text"]
            lp = ch["logprobs"]
            for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
                first = next(iter(top.items()))  # json keeps the server's order: most likely first
                assert first == (token, value), (token, value, top)
                assert list(top.values()) == sorted(top.values(), reverse=True), top
        with requests.post(f"{url}/v1/completions", stream=True, timeout=60,
                           json={"model": MODEL, "prompt": [1], "max_tokens": 8, "n": 3, "seed": 1,
                                 "stream": True}) as s:
            events = sse(s)
        assert events[-1] == "[DONE]" and events.count("[DONE]") == 1, events
        finishes = [e["choices"][0]["index"] for e in events[:-1] if e["choices"][0]["finish_reason"]]
        assert sorted(finishes) == [0, 1, 2], finishes

        # 3. Errors in KServe's shape.
        for path, payload, status, needle in [
                (f"/v2/models/{MODEL}/generate", {"text_input": "a", "parameters": {"beam_width": 2}}, 400,
                 "beam_width"),
                (f"/v2/models/{MODEL}/generate", {"text_input": "a", "max_tokens": "ten"}, 400, "max_tokens"),
                (f"/v2/models/{MODEL}/generate", {"max_tokens": 3}, 400, "text_input"),
                (f"/v2/models/{MODEL}/generate_stream", {"text_input": "a", "top_k": 1.5}, 400, "top_k"),
                ("/v2/models/nope/generate", {"text_input": "a"}, 404, "nope")]:
            r = requests.post(url + path, json=payload, timeout=60)
            assert r.status_code == status, (path, payload, r.status_code, r.text)
            assert isinstance(r.json()["error"], str) and needle in r.json()["error"], r.text
        r = requests.post(f"{url}/v2/models/{MODEL}/generate", data="{not json", timeout=60,
                          headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "malformed JSON" in r.json()["error"], r.text

        # 4. Images on a LLaVA: KServe generate's `image` and a chat's image_url part, the same greedy tokens.
        with open(f"{src}/tests/fixtures/images/chelsea.png", "rb") as f:
            image = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        common = {"max_tokens": 6, "temperature": 0, "ignore_eos": True}
        k = requests.post(f"{url}/v2/models/llava/generate", timeout=60,
                          json={"text_input": "USER: <image>\nhi\nASSISTANT:", "image": image, **common})
        assert k.status_code == 200, k.text
        chat = requests.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "llava", **common,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                      {"type": "text", "text": "hi"}]}]})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] == k.json()["text_output"], (chat.text, k.text)
        assert chat.json()["usage"]["prompt_tokens"] == k.json()["prompt_tokens"] > 25, (chat.text, k.text)
        r = requests.post(f"{url}/v2/models/llava/generate", json={"text_input": "<image> <image>", "image": image},
                          timeout=60)
        assert r.status_code == 400 and "placeholder" in r.json()["error"], r.text

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, open(os.path.join(tmp, "server.log")).read()[-2000:]
        server = None
        print("PASS: generate_client_test")
    finally:
        if server is not None:
            server.kill()
            server.wait()
            sys.stderr.write(open(os.path.join(tmp, "server.log")).read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
