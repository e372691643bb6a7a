// Internal to the audio decoder: a check of an Ogg Vorbis stream's three header packets with libogg and
// libvorbis, run before libsndfile sees the bytes.
//
// Why: libsndfile 1.2.0 (Debian 12) leaks ~6 KB (the vorbis_info it initialised) every time it fails to open
// an Ogg Vorbis file with malformed headers (upstream issue #922); a server fed such files would grow without
// bound. Parsing the same packets here, with every allocation released, refuses those files before libsndfile
// can leak. Not part of the public API. Tests: tests/unit/frontends/audio/audio_decode_test.cpp (ASan/LSan
// over corrupted Vorbis files); fuzz: fuzz/audio_decode_fuzz.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace mmserve::audio::detail {

// OK when the first logical stream is not Vorbis (Opus, or anything libsndfile will judge) or when its
// identification, comment and setup headers all parse; kInvalidArgument otherwise.
Status check_vorbis_headers(std::span<const uint8_t> bytes);

}  // namespace mmserve::audio::detail
