#!/usr/bin/env python3
"""Builds mmserve's Silero VAD golden with the OFFICIAL `silero_vad` package (pip install silero-vad; needs torch).

    python3 tools/reference/make_silero_vad_golden.py          # writes tests/fixtures/vad/silero_vad_golden.json
    python3 tools/reference/make_silero_vad_golden.py --out /tmp/silero_vad_golden.json

Runs on the CPU, needs no network. Inputs (in this repository): tests/fixtures/audio/jfk.wav (read with `wave`,
int16 / 32768.0 as float32, exactly as mmserve's decoder reads 16-bit PCM) and assets/vad/silero_vad_16k.safetensors
(the weights mmserve compiles in).

Before anything is written, every tensor of the safetensors file must be found, value for value, in the state dict
of the package's model (load_silero_vad(), the JIT model): otherwise the package ships other weights than mmserve's
(e.g. a different Silero release) and its outputs would not test mmserve's forward; the script then stops with the
names that did not match and the package version, and writes nothing.

For two inputs, `jfk` (jfk.wav) and `jfk_silence` (jfk.wav with 2 s of zeros inserted at sample 20480, 1.28 s; the
same numbers as tests/unit/models/silero_vad_test.cpp), it records:
  probs   the speech probability of every 512-sample window: model.reset_states(), then model(chunk, 16000).item()
          over consecutive chunks, the last one zero-padded: what get_speech_timestamps computes internally
  cases   get_speech_timestamps(audio, model, ...) for the default options and one variation of each option
          (threshold, min_speech_duration_ms, min_silence_duration_ms, speech_pad_ms, max_speech_duration_s), with
          the options used; spans in samples, [start, end)
plus the package, torch and Python versions. silero_vad_test.cpp compares mmserve's probabilities within 1e-4, its
state machine exactly on these probabilities, and its end-to-end spans within one window.
"""
import argparse
import json
import math
import os
import platform
import struct
import sys
import wave

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JFK = os.path.join(REPO, "tests", "fixtures", "audio", "jfk.wav")
WEIGHTS = os.path.join(REPO, "assets", "vad", "silero_vad_16k.safetensors")
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "vad", "silero_vad_golden.json")
INSERT_AT = 20480
INSERT_LENGTH = 2 * 16000
WINDOW = 512

# get_speech_timestamps' defaults, then one change per option.
DEFAULTS = dict(threshold=0.5, min_speech_duration_ms=250, min_silence_duration_ms=100, speech_pad_ms=30,
                max_speech_duration_s=None)
VARIATIONS = [
    {},
    {"threshold": 0.9},
    {"threshold": 0.3},
    {"min_speech_duration_ms": 1500},
    {"min_silence_duration_ms": 1200},
    {"min_silence_duration_ms": 20},
    {"speech_pad_ms": 0},
    {"speech_pad_ms": 200},
    {"max_speech_duration_s": 1.0},
    {"max_speech_duration_s": 3.0},
    {"max_speech_duration_s": 0.6},
    {"max_speech_duration_s": 2.0, "min_silence_duration_ms": 300},  # splits at a pause inside a span
]


def read_jfk():
    with wave.open(JFK, "rb") as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getframerate() == 16000, "jfk.wav changed"
        n = w.getnframes()
        ints = struct.unpack("<%dh" % n, w.readframes(n))
    return [x / 32768.0 for x in ints]


def read_safetensors(path, torch):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=torch.float32)
        tensors[name] = t.reshape(info["shape"])
    return tensors


def check_same_weights(model, torch):
    """Every safetensors tensor must equal (exactly, after flattening) some tensor of the package's model."""
    ours = read_safetensors(WEIGHTS, torch)
    theirs = [t.detach().float().flatten() for t in model.state_dict().values()]
    unmatched = []
    for name, t in ours.items():
        flat = t.flatten()
        if not any(c.numel() == flat.numel() and torch.equal(c, flat) for c in theirs):
            unmatched.append(name)
    return unmatched


def window_probs(model, audio, torch):
    model.reset_states()
    probs = []
    for start in range(0, len(audio), WINDOW):
        chunk = audio[start:start + WINDOW]
        if len(chunk) < WINDOW:
            chunk = torch.nn.functional.pad(chunk, (0, WINDOW - len(chunk)))
        probs.append(model(chunk, 16000).item())
    return probs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()

    try:
        import torch
        import silero_vad
        from silero_vad import get_speech_timestamps, load_silero_vad
    except ImportError as e:
        sys.exit("needs the official package: pip install silero-vad (with torch): %s" % e)
    try:
        from importlib.metadata import version
        package_version = version("silero-vad")
    except Exception:  # noqa: BLE001 - only informative
        package_version = getattr(silero_vad, "__version__", "unknown")
    torch.set_num_threads(1)

    model = load_silero_vad()  # the JIT model (onnx=False), as the package's README uses it
    unmatched = check_same_weights(model, torch)
    if unmatched:
        sys.exit("silero-vad %s ships weights that differ from %s in: %s; no golden written (install the release "
                 "that matches assets/vad, see its README)" % (package_version, WEIGHTS, ", ".join(unmatched)))

    jfk = torch.tensor(read_jfk(), dtype=torch.float32)
    inputs = {
        "jfk": jfk,
        "jfk_silence": torch.cat([jfk[:INSERT_AT], torch.zeros(INSERT_LENGTH), jfk[INSERT_AT:]]),
    }
    out = {
        "source": "tools/reference/make_silero_vad_golden.py",
        "silero_vad": package_version,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "weights": "assets/vad/silero_vad_16k.safetensors (every tensor found in the package's model)",
        "insert_at": INSERT_AT,
        "insert_length": INSERT_LENGTH,
        "inputs": {},
    }
    for name, audio in inputs.items():
        probs = window_probs(model, audio, torch)
        assert len(probs) == math.ceil(len(audio) / WINDOW)
        cases = []
        for change in VARIATIONS:
            options = dict(DEFAULTS, **change)
            kwargs = dict(options)
            if kwargs["max_speech_duration_s"] is None:
                kwargs["max_speech_duration_s"] = float("inf")
            spans = get_speech_timestamps(audio, model, sampling_rate=16000, **kwargs)
            cases.append({"options": options, "spans": [[int(s["start"]), int(s["end"])] for s in spans]})
        out["inputs"][name] = {"samples": len(audio), "probs": probs, "cases": cases}
        print("%s: %d windows, default spans %s" % (name, len(probs), cases[0]["spans"]))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
