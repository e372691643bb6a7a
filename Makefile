# The two commands: `make serve` and `make test` (both install what they need first, via `make deps`).
# Other targets: `make` (build), `make deps`, `make fuzz` (short libFuzzer runs), `make format`, `make tidy`,
# `make gpu-build` (the sm_90a build carried to the GPU host, see scripts/gpu-check.sh).
PRESET ?= cpu-release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
MMSERVE := $(BUILD)/src/cli/mmserve
DEMO_DIR ?= build/demo-clip

# Debian 12 packages the build and tests need. Kept in one list so `make deps` is the single source.
DEB_PACKAGES := build-essential cmake ninja-build ccache pkg-config git \
  libopenblas-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libutf8proc-dev libpcre2-dev \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
  clang-14 libclang-rt-14-dev clang-format clang-tidy python3

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build deps serve test fuzz format tidy demo gpu-build clean

all: build

# Idempotent: installs only the packages that are missing (no apt-get update when nothing is).
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "deps: all Debian packages present"; fi

$(BUILD)/build.ninja:
	cmake --preset $(PRESET)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(MMSERVE) demo-model --overwrite --output $(DEMO_DIR)

# The HTTP server lands with the serving issue; until then `serve` shows the demo model working end to end.
serve: demo
	$(MMSERVE) inspect --model $(DEMO_DIR)
	$(MMSERVE) embed --model $(DEMO_DIR) --image tests/fixtures/images/chelsea.png --text "a photo of a cat" \
	  | cut -c1-300
	@echo "(the HTTP server, mmserve serve, is the next issue; see README)"

test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure
	$(MAKE) fuzz FUZZ_SECONDS=20

# Builds the libFuzzer targets with clang and runs each for FUZZ_SECONDS over its seed corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake --preset fuzz >/dev/null
	cmake --build build/fuzz -j $(JOBS)
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
