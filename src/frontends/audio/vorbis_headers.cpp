// Ogg Vorbis header check (see vorbis_headers.h): libogg splits the bytes into pages and packets, libvorbis
// parses the first three packets of the first logical stream. Bytes are fed in blocks and parsing stops
// after the third header, so the cost is that of the headers (a few KB, the setup header up to ~100 KB).
// libogg and libvorbis report errors through return values only.
// Tests: tests/unit/frontends/audio/audio_decode_test.cpp.
#include "frontends/audio/vorbis_headers.h"

#include <ogg/ogg.h>
#include <vorbis/codec.h>

#include <algorithm>
#include <cstring>

namespace mmserve::audio::detail {
namespace {

constexpr size_t kFeedBytes = 4096;

// Owns every libogg/libvorbis structure the check touches, released on every path.
struct HeaderParser {
  ogg_sync_state sync{};
  ogg_stream_state stream{};
  vorbis_info info{};
  vorbis_comment comment{};
  bool stream_ready = false;
  HeaderParser() {
    ogg_sync_init(&sync);
    vorbis_info_init(&info);
    vorbis_comment_init(&comment);
  }
  ~HeaderParser() {
    vorbis_comment_clear(&comment);
    vorbis_info_clear(&info);
    if (stream_ready) ogg_stream_clear(&stream);
    ogg_sync_clear(&sync);
  }
  HeaderParser(const HeaderParser&) = delete;
  HeaderParser& operator=(const HeaderParser&) = delete;
};

}  // namespace

Status check_vorbis_headers(std::span<const uint8_t> bytes) {
  HeaderParser parser;
  int headers = 0;
  size_t fed = 0;
  ogg_page page;
  ogg_packet packet;
  while (headers < 3) {
    const int got_page = ogg_sync_pageout(&parser.sync, &page);
    if (got_page < 0) continue;  // bytes skipped to the next capture pattern
    if (got_page == 0) {         // more bytes needed
      if (fed == bytes.size()) break;
      const size_t n = std::min(kFeedBytes, bytes.size() - fed);
      char* buffer = ogg_sync_buffer(&parser.sync, static_cast<long>(n));
      if (buffer == nullptr) return internal_error("audio: libogg could not allocate its buffer");
      std::memcpy(buffer, bytes.data() + fed, n);
      ogg_sync_wrote(&parser.sync, static_cast<long>(n));
      fed += n;
      continue;
    }
    if (!parser.stream_ready) {
      if (ogg_stream_init(&parser.stream, ogg_page_serialno(&page)) != 0) {
        return internal_error("audio: libogg could not initialise a stream");
      }
      parser.stream_ready = true;
    }
    if (ogg_stream_pagein(&parser.stream, &page) != 0) continue;  // another logical stream's page
    while (headers < 3) {
      const int got_packet = ogg_stream_packetout(&parser.stream, &packet);
      if (got_packet == 0) break;
      if (got_packet < 0) {
        return invalid_argument("not an audio file we can read: Ogg stream with a gap in its headers");
      }
      // libsndfile calls a stream Vorbis from these 7 bytes alone (vorbis_synthesis_idheader also wants the
      // beginning-of-stream flag): the same test here, so whatever it would parse as Vorbis is checked.
      const bool vorbis_id =
          packet.bytes >= 7 && packet.packet[0] == 1 && std::memcmp(packet.packet + 1, "vorbis", 6) == 0;
      if (headers == 0 && !vorbis_id) return ok_status();  // Opus or something else: libsndfile's call
      if (vorbis_synthesis_headerin(&parser.info, &parser.comment, &packet) != 0) {
        return invalid_argument("not an audio file we can read: malformed Vorbis header " +
                                std::to_string(headers + 1));
      }
      ++headers;
    }
  }
  if (headers == 0) return ok_status();  // no complete first packet: libsndfile reports what is wrong
  if (headers < 3) return invalid_argument("not an audio file we can read: Vorbis headers are incomplete");
  return ok_status();
}

}  // namespace mmserve::audio::detail
