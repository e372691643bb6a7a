#!/usr/bin/env python3
"""The speech routes of `mmserve serve` driven with Python's `requests`, as a third party would.

It starts `mmserve serve` (copies of tests/fixtures/whisper/whisper-tiny-mel80-f32 and the tiny CLIP fixture in a
temporary repository, a free port) and checks:
  1. KServe v2 audio: the WAV's bytes as base64 in JSON and raw in the binary tensor extension; outputs `text`,
     `segments` (a JSON array) and `language`, BYTES [1]; model metadata lists them;
  2. OpenAI multipart uploads (requests' files=): json, text and verbose_json agree with each other and with
     KServe's answer for the same file and options (two independent request paths through the server), and
     with `mmserve transcribe` (the CLI over the same executor);
  3. broken inputs: non-audio bytes, a truncated header, zero bytes, an unsupported container (AIFF), a wrong
     datatype, text sent to the speech model, audio sent to CLIP, a malformed multipart body: 4xx in the API's
     error shape, and the server keeps serving;
then SIGTERM and exit code 0. The fixture's weights are random: the text is gibberish and is never hard-coded.
Usage: audio_client_test.py --binary build/.../mmserve --fixtures tests/fixtures
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

import requests

WHISPER = "whisper-tiny"
CLIP = "clip-tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_model(src, dst):
    os.makedirs(dst)
    for name in os.listdir(src):
        if not name.startswith("golden"):
            shutil.copy(os.path.join(src, name), dst)


def expect_error(r, status, family, needle=""):
    assert r.status_code == status, (status, r.status_code, r.text[:500])
    body = r.json()
    if family == "kserve":
        assert isinstance(body["error"], str), body
        message = body["error"]
    else:
        assert isinstance(body["error"], dict) and {"message", "type", "code"} <= set(body["error"]), body
        message = body["error"]["message"]
    assert needle in message, (needle, message)


def cli_transcript(binary, model_dir, wav, fmt):
    """`mmserve transcribe` output (the CLI over the same executor)."""
    r = subprocess.run([binary, "transcribe", "--model", model_dir, wav, "--format", fmt], capture_output=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    wav_path = os.path.join(args.fixtures, "audio", "jfk.wav")
    wav = open(wav_path, "rb").read()
    root = tempfile.mkdtemp(prefix="mmserve_py_audio_")
    repo = os.path.join(root, "repo")
    copy_model(os.path.join(args.fixtures, "whisper", "whisper-tiny-mel80-f32"), os.path.join(repo, WHISPER))
    copy_model(os.path.join(args.fixtures, "clip-tiny-quickgelu-f32"), os.path.join(repo, CLIP))
    port = free_port()
    base = "http://127.0.0.1:%d" % port
    err = open(os.path.join(root, "stderr"), "w+")
    server = subprocess.Popen([args.binary, "serve", "--model-repository", repo, "--port", str(port)], stderr=err)
    try:
        deadline = time.time() + 120
        while True:
            try:
                if requests.get(base + "/v2/health/ready", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if server.poll() is not None or time.time() > deadline:
                err.seek(0)
                raise SystemExit("server did not become ready:\n" + err.read())
            time.sleep(0.1)
        infer = base + "/v2/models/%s/infer" % WHISPER

        # 1. KServe, JSON and binary.
        meta = requests.get(base + "/v2/models/" + WHISPER, timeout=30).json()
        assert meta["platform"] == "mmserve_whisper", meta
        assert [t["name"] for t in meta["inputs"]] == ["audio"], meta
        assert [t["name"] for t in meta["outputs"]] == ["text", "segments", "language"], meta
        body = {"id": "py-audio", "inputs": [{"name": "audio", "datatype": "BYTES", "shape": [1],
                                              "data": [base64.b64encode(wav).decode()]}]}
        r = requests.post(infer, json=body, timeout=300)
        assert r.status_code == 200, r.text[:500]
        out = r.json()
        assert out["id"] == "py-audio", out
        tensors = {o["name"]: o for o in out["outputs"]}
        for name in ("text", "segments", "language"):
            assert tensors[name]["datatype"] == "BYTES" and tensors[name]["shape"] == [1], tensors[name]
        kserve_text = tensors["text"]["data"][0]
        segments = json.loads(tensors["segments"]["data"][0])
        assert "".join(s["text"] for s in segments) == kserve_text, (segments, kserve_text)
        for s in segments:  # (a random model may place timestamps past the audio's end, as the reference does)
            assert 0 <= s["start"] <= s["end"] and s["tokens"], s

        element = struct.pack("<I", len(wav)) + wav
        header = json.dumps({"inputs": [{"name": "audio", "datatype": "BYTES", "shape": [1],
                                         "parameters": {"binary_data_size": len(element)}}],
                             "parameters": {"binary_data_output": True}}).encode()
        r = requests.post(infer, data=header + element, timeout=300, headers={
            "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
        assert r.status_code == 200, r.text[:500]
        length = int(r.headers["Inference-Header-Content-Length"])
        out = json.loads(r.content[:length])
        offset, values = length, {}
        for o in out["outputs"]:
            size = o["parameters"]["binary_data_size"]
            (n,) = struct.unpack("<I", r.content[offset:offset + 4])
            assert n + 4 == size, o
            values[o["name"]] = r.content[offset + 4:offset + size].decode("utf-8")
            offset += size
        assert offset == len(r.content)
        assert values["text"] == kserve_text, (values["text"], kserve_text)

        # 2. OpenAI multipart, three formats, one transcript.
        def upload(route, fields, model=WHISPER, filename="jfk.wav", content=wav):
            return requests.post(base + route, files={"file": (filename, content, "audio/wav")},
                                 data=dict({"model": model}, **fields), timeout=300)

        r = upload("/v1/audio/transcriptions", {})
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), r.text[:500]
        assert r.json()["text"] == kserve_text, (r.json(), kserve_text)
        r = upload("/v1/audio/transcriptions", {"response_format": "text"})
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain"), r.text[:500]
        assert r.text.strip() == kserve_text.strip(), (r.text, kserve_text)
        r = upload("/v1/audio/transcriptions", {"response_format": "verbose_json"})
        assert r.status_code == 200, r.text[:500]
        verbose = r.json()
        assert verbose["text"] == kserve_text and verbose["task"] == "transcribe", verbose
        assert abs(verbose["duration"] - 11.0) < 1e-6, verbose
        assert [s["tokens"] for s in verbose["segments"]] == [s["tokens"] for s in segments]
        cli = cli_transcript(args.binary, os.path.join(repo, WHISPER), wav_path, "verbose_json")
        assert json.loads(cli) == verbose, (cli[:300], verbose)

        # 3. Broken inputs.
        def kserve_audio(data, model=WHISPER, datatype="BYTES"):
            b = {"inputs": [{"name": "audio", "datatype": datatype, "shape": [1],
                             "data": [base64.b64encode(data).decode()]}]}
            return requests.post(base + "/v2/models/%s/infer" % model, json=b, timeout=60)

        expect_error(kserve_audio(b"this is a text file, not audio"), 400, "kserve", "audio")
        expect_error(kserve_audio(wav[:30]), 400, "kserve", "audio")
        expect_error(kserve_audio(b""), 400, "kserve", "empty")
        expect_error(kserve_audio(b"FORM\x00\x00\x10\x00AIFFCOMM" + b"\x01" * 64), 400, "kserve", "audio")
        expect_error(kserve_audio(wav, datatype="UINT8"), 400, "kserve", "BYTES")
        expect_error(kserve_audio(wav, model=CLIP), 400, "kserve", "CLIP")
        expect_error(requests.post(infer, json={"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                                            "data": ["hello"]}]}, timeout=60),
                     400, "kserve", "speech-to-text")
        expect_error(upload("/v1/audio/transcriptions", {}, content=b"not audio"), 400, "openai", "audio")
        expect_error(upload("/v1/audio/transcriptions", {}, content=b""), 400, "openai", "empty")
        expect_error(upload("/v1/audio/transcriptions", {"timestamp_granularities[]": "word"}), 400, "openai",
                     "word timestamps")
        expect_error(upload("/v1/audio/transcriptions", {}, model="nope"), 404, "openai", "nope")
        bad = requests.post(base + "/v1/audio/transcriptions", timeout=60,
                            data=b"--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nx",
                            headers={"Content-Type": "multipart/form-data; boundary=b0undary"})
        expect_error(bad, 400, "openai", "malformed multipart")
        r = upload("/v1/audio/translations", {"response_format": "json"})
        assert r.status_code == 200 and "text" in r.json(), r.text[:500]

        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
        assert code == 0, "exit code %d" % code
        print("audio_client_test: OK (KServe JSON and binary, OpenAI multipart, broken inputs)")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
