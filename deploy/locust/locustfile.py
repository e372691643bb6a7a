"""Locust users for mmserve: the same request mix as `mmserve bench`'s built-in profile.

60% texts over the OpenAI API (POST /v1/embeddings, priority 1), 30% images over KServe v2
(POST /v2/models/M/infer, BYTES input, priority 2), 10% large images (1920x1080) over KServe v2 (priority 3),
with the priority in the `x-mmserve-priority` header (docs/api.md). Every answer is checked: HTTP 200 and one
embedding of the model's dimension; anything else is a Locust failure (a 429 included: at the load you chose
the server shed work).

For users who run Locust; `mmserve bench` is the open-loop generator (Locust users wait for each answer, so
their offered load bends to the server's speed). Run headless against a server:

    locust -f deploy/locust/locustfile.py --headless -u 10 -r 5 -t 10s --host http://127.0.0.1:8000

Environment: MMSERVE_MODEL (default: the first of GET /v1/models), MMSERVE_API_KEY (sent as a Bearer
token), MMSERVE_IMAGE_DIR (images for the "image" class; default: the repository's tests/fixtures/images;
synthesised 320x240 PNGs when absent). Large images are synthesised PNGs. Tested by
tests/e2e/client_test.sh locust (ctest e2e_client_locust): a 10 s run against the real server, zero failures.
"""
import base64
import os
import random
import struct
import zlib

from locust import HttpUser, between, task

TEXTS = [
    "a photo of a cat",
    "a diagram of two dogs playing in the snow",
    "an astronaut riding a horse on the moon, digital art",
    "a close-up photograph of a rocket on the launch pad before lift-off at dawn",
    "street",
    "a bowl of ramen with an egg, chopsticks and steam rising over a wooden table in a small restaurant",
    "猫の写真",
    "a black and white photograph of a man holding a camera on a tripod in a park",
]

_HERE = os.path.dirname(os.path.abspath(__file__))
_FIXTURE_IMAGES = os.path.join(_HERE, "..", "..", "tests", "fixtures", "images")
_SMALL_IMAGE_NAMES = ["chelsea.png", "rocket.jpg", "camera.png", "chelsea_lossy.webp"]


def synth_png(width, height, seed):
    """A real RGB PNG (zlib + CRC chunks from the standard library): gradients and seeded noise."""
    rng = random.Random(seed)
    nbytes = width * 3
    noise = [int.from_bytes(bytes(b & 0x01 for b in rng.randbytes(nbytes)), "big") for _ in range(16)]
    gradient = int.from_bytes(bytes((255 * x // max(1, width - 1), (seed * 40) & 255, 128)[c]
                                    for x in range(width) for c in range(3)), "big")
    raw = bytearray()
    for y in range(height):
        shade = int.from_bytes(bytes((0, 255 * y // max(1, height - 1), 0)) * width, "big")
        grain = noise[y % 16] if y % 4 == 0 else 0  # noise on a quarter of the rows: ~0.75 MB at 1920x1080
        raw += b"\x00" + (gradient ^ shade ^ grain).to_bytes(nbytes, "big")  # filter type 0

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 6))
            + chunk(b"IEND", b""))


def _load_small_images():
    directory = os.environ.get("MMSERVE_IMAGE_DIR", _FIXTURE_IMAGES)
    images = []
    for name in _SMALL_IMAGE_NAMES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                images.append(f.read())
    return images or [synth_png(320, 240, seed) for seed in (1, 2, 3, 4)]


SMALL_IMAGES_B64 = [base64.b64encode(b).decode() for b in _load_small_images()]
LARGE_IMAGES_B64 = [base64.b64encode(synth_png(1920, 1080, seed)).decode() for seed in (1, 2)]


class MmserveUser(HttpUser):
    """One client: the bench mix, 50-200 ms of think time between requests."""

    wait_time = between(0.05, 0.2)
    model = os.environ.get("MMSERVE_MODEL", "")

    def on_start(self):
        self.auth = {}
        if os.environ.get("MMSERVE_API_KEY"):
            self.auth = {"Authorization": "Bearer " + os.environ["MMSERVE_API_KEY"]}
        if not MmserveUser.model:
            with self.client.get("/v1/models", headers=self.auth, name="/v1/models", catch_response=True) as r:
                data = r.json().get("data") if r.status_code == 200 else None
                if not data:
                    r.failure(f"GET /v1/models: HTTP {r.status_code}, no model listed")
                    return
                MmserveUser.model = data[0]["id"]

    def _headers(self, priority):
        return {**self.auth, "x-mmserve-priority": str(priority)}

    def _kserve(self, name, inputs, priority):
        body = {"inputs": inputs}
        with self.client.post(f"/v2/models/{MmserveUser.model}/infer", json=body, headers=self._headers(priority),
                              name=name, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            outputs = {o["name"]: o for o in r.json().get("outputs", [])}
            expected = "image_embeds" if inputs[0]["name"] == "image" else "text_embeds"
            out = outputs.get(expected)
            if out is None or out["shape"][0] != 1 or len(out["data"]) != out["shape"][1]:
                r.failure(f"bad outputs: {sorted(outputs)}")

    @task(6)
    def text_openai(self):
        body = {"model": MmserveUser.model, "input": random.choice(TEXTS)}
        with self.client.post("/v1/embeddings", json=body, headers=self._headers(1), name="text (openai)",
                              catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                return
            data = r.json().get("data", [])
            if len(data) != 1 or not data[0].get("embedding"):
                r.failure("expected one embedding")

    @task(3)
    def image_kserve(self):
        image = random.choice(SMALL_IMAGES_B64)
        self._kserve("image (kserve)", [{"name": "image", "datatype": "BYTES", "shape": [1], "data": [image]}], 2)

    @task(1)
    def large_image_kserve(self):
        image = random.choice(LARGE_IMAGES_B64)
        self._kserve("large_image (kserve)", [{"name": "image", "datatype": "BYTES", "shape": [1], "data": [image]}],
                     3)
