#!/usr/bin/env python3
"""Converts the reference openai/whisper package's mel filter banks (whisper/assets/mel_filters.npz) into a
safetensors file the C++ tests read with mmserve's own loader.

    python3 tools/reference/convert_whisper_mel_filters.py ../shared/data/whisper_mel_filters.npz \
        tests/fixtures/whisper/mel_filters.safetensors

Python standard library only (no numpy): the .npz is a zip of .npy files, each a magic string, a version, a
header length, a Python-literal header ({'descr': '<f4', 'fortran_order': False, 'shape': (80, 201)}) and the
raw little-endian data. The output holds two F32 tensors, mel_80 [80, 201] and mel_128 [128, 201], byte for
byte the npz's data (openai computed them with librosa.filters.mel(sr=16000, n_fft=400, n_mels=N), Slaney
scale and norm, in float32). safetensors layout: an 8-byte little-endian header length, a JSON header
(dtype, shape, data_offsets per tensor; padded with spaces to a multiple of 8 so the data stays aligned),
then the concatenated data.
"""
import argparse
import ast
import json
import os
import struct
import sys
import zipfile

EXPECTED = {"mel_80": (80, 201), "mel_128": (128, 201)}


def read_npy(raw: bytes, name: str):
    """Returns (shape, data bytes) of a little-endian float32, C-order .npy payload."""
    if raw[:6] != b"\x93NUMPY":
        raise ValueError(f"{name}: not a .npy file")
    major = raw[6]
    if major == 1:
        (header_len,) = struct.unpack_from("<H", raw, 8)
        start = 10
    elif major in (2, 3):
        (header_len,) = struct.unpack_from("<I", raw, 8)
        start = 12
    else:
        raise ValueError(f"{name}: unsupported .npy version {major}")
    header = ast.literal_eval(raw[start:start + header_len].decode("latin1"))
    if header.get("descr") != "<f4" or header.get("fortran_order"):
        raise ValueError(f"{name}: expected little-endian float32 in C order, got {header}")
    shape = tuple(header["shape"])
    count = 1
    for dim in shape:
        count *= dim
    data = raw[start + header_len:]
    if len(data) != 4 * count:
        raise ValueError(f"{name}: {len(data)} data bytes for shape {shape}")
    return shape, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("npz", help="openai/whisper's mel_filters.npz")
    parser.add_argument("out", help="output .safetensors path")
    args = parser.parse_args()

    tensors = {}
    with zipfile.ZipFile(args.npz) as archive:
        for name, shape in EXPECTED.items():
            got_shape, data = read_npy(archive.read(name + ".npy"), name)
            if got_shape != shape:
                raise ValueError(f"{name}: shape {got_shape}, expected {shape}")
            tensors[name] = (got_shape, data)

    header = {"__metadata__": {"source": "openai/whisper whisper/assets/mel_filters.npz",
                               "converter": "tools/reference/convert_whisper_mel_filters.py"}}
    offset = 0
    for name in sorted(tensors):
        shape, data = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as out:
        out.write(struct.pack("<Q", len(header_bytes)))
        out.write(header_bytes)
        for name in sorted(tensors):
            out.write(tensors[name][1])
    print(f"wrote {args.out}: " + ", ".join(f"{n} {list(tensors[n][0])}" for n in sorted(tensors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
