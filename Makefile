# The two commands: `make serve` and `make test` (both install what they need first, via `make deps`).
# Other targets: `make` (build), `make deps`, `make fuzz` (short libFuzzer runs), `make format`, `make tidy`,
# `make gpu-build` (the sm_90a build carried to the GPU host, see scripts/gpu-check.sh).
PRESET ?= cpu-release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
MMSERVE := $(BUILD)/src/cli/mmserve
DEMO_DIR ?= build/demo-clip
PORT ?= 8000

# Debian 12 packages the build and tests need. Kept in one list so `make deps` is the single source.
DEB_PACKAGES := build-essential cmake ninja-build ccache pkg-config git \
  libopenblas-dev libjpeg62-turbo-dev libpng-dev libdeflate-dev libwebp-dev libutf8proc-dev libpcre2-dev \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libyaml-cpp-dev libcpp-httplib-dev libsndfile1-dev libsamplerate0-dev libvorbis-dev libogg-dev zlib1g-dev \
  clang-14 libclang-rt-14-dev clang-format clang-tidy python3 python3-requests python3-yaml \
  curl nodejs prometheus python3-locust

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps serve test fuzz format tidy demo gpu-build clean tokenizer-fixtures

all: build

# Idempotent: installs only the packages that are missing (no apt-get update when nothing is).
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "deps: all Debian packages present"; fi
	@# npm: Debian's package on a stock system; a nodejs build that bundles npm (NodeSource) conflicts with it.
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq npm; }

$(BUILD)/build.ninja:
	cmake --preset $(PRESET)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(MMSERVE) demo-model --overwrite --output $(DEMO_DIR)

# Serves the built-in demo CLIP (random weights, real tokenizer) on http://127.0.0.1:8000 until Ctrl-C.
serve: build
	$(MMSERVE) serve --host 127.0.0.1 --port $(PORT)

# The official `openai` npm client used by tests/e2e (pinned in its package-lock.json).
OPENAI_NODE_MODULES := tests/e2e/openai/node_modules/.package-lock.json
$(OPENAI_NODE_MODULES): tests/e2e/openai/package-lock.json
	npm ci --prefix tests/e2e/openai --no-audit --no-fund

# The real tokenizers the HfTokenizer tests read (Llama 3.1, Mistral; pinned with integrity hashes in
# tests/fixtures/tokenizers_npm/package-lock.json). Without them those tests fail.
TOKENIZER_NODE_MODULES := tests/fixtures/tokenizers_npm/node_modules/.package-lock.json
$(TOKENIZER_NODE_MODULES): tests/fixtures/tokenizers_npm/package-lock.json
	npm ci --prefix tests/fixtures/tokenizers_npm --no-audit --no-fund --ignore-scripts
tokenizer-fixtures: $(TOKENIZER_NODE_MODULES)

test: build $(OPENAI_NODE_MODULES) $(TOKENIZER_NODE_MODULES)
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure
	@# 10 s per fuzz target (21 of them: fuzz/CMakeLists.txt defines them) keeps a clean CI run well inside its time budget; `make fuzz` runs 60 s each.
	$(MAKE) fuzz FUZZ_SECONDS=10

# Builds the libFuzzer targets with clang and runs each for FUZZ_SECONDS over its seed corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake --preset fuzz >/dev/null
	cmake --build build/fuzz -j $(JOBS) --target fuzzers
	scripts/run-fuzzers.sh build/fuzz/fuzz $(FUZZ_SECONDS)

format:
	find src tests bench fuzz -name '*.cpp' -o -name '*.h' -o -name '*.cu' | xargs clang-format -i

tidy: build
	find src -name '*.cpp' | xargs clang-tidy -p $(BUILD) --quiet

gpu-build: deps
	cmake --preset gpu-host
	cmake --build build/gpu-host -j $(JOBS)

clean:
	rm -rf build
