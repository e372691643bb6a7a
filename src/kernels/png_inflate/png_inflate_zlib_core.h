// The PNG decoder's zlib layer (png_inflate_core.h's last part): the zlib header, the deflate blocks in turn (stored
// ones copied by the whole team; Huffman ones after their tables are built, by the serial decoder of
// png_inflate_core.h or the speculative one of png_inflate_spec_core.h, as the caller picks), and the Adler-32.
// Both decoders give the same output and status (png_inflate.h's contract). Tests: png_inflate_test.cpp,
// png_inflate_cuda_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/png_inflate/png_inflate.h"
#include "kernels/png_inflate/png_inflate_core.h"
#include "kernels/png_inflate/png_inflate_spec_core.h"

namespace mmserve::kernels::png_inflate {

// zlib stream `in` -> exactly out_size bytes at out (png_inflate.h's rules). The same status in every lane.
template <class Team>
MMSERVE_PNG_HD Status inflate_zlib(Team& team, InflateWorkspace& ws, const uint8_t* in, uint64_t in_size, uint8_t* out,
                                   uint32_t out_size, PngHuffmanDecoder decoder) {
  if (in_size > 0xfffffff0u) return Status::kBadImage;  // positions are 32-bit
  if (in_size < 6) return Status::kTruncatedInput;
  const uint32_t cmf = load_u8(in), flg = load_u8(in + 1);
  // Deflate, a 32 KiB window (decode_png_fast's rule: zlib may refuse distances a smaller one forbids), FCHECK, and
  // no preset dictionary.
  if ((cmf & 15) != 8 || (cmf >> 4) != 7 || (cmf * 256 + flg) % 31 != 0 || (flg & 0x20) != 0) {
    return Status::kBadZlibHeader;
  }
  BitReader br{in + 2, in_size - 6, 0, 0, 0};
  const uint32_t lane = team.lane(), lanes = team.size();
  Adler adler;
  uint32_t out_pos = 0;
  bool fixed_loaded = false;
  for (bool final_block = false; !final_block;) {
    uint32_t header[1] = {0};
    if (team.leader()) {
      br.need(3);
      header[0] = br.pop(3);
    }
    hand_out(team, ws, header);
    final_block = (header[0] & 1) != 0;
    const uint32_t type = header[0] >> 1;
    if (type == 3) return Status::kBadBlockType;
    if (type == 0) {
      uint32_t v[3] = {0, 0, 0};  // status, first byte, length
      if (team.leader()) {
        const uint64_t consumed = br.consumed(), start = (consumed + 7) / 8;
        if (consumed > br.size * 8 || start + 4 > br.size) {
          v[0] = static_cast<uint32_t>(Status::kTruncatedInput);
        } else {
          const uint32_t len = load_u8(br.data + start) | load_u8(br.data + start + 1) << 8;
          const uint32_t nlen = load_u8(br.data + start + 2) | load_u8(br.data + start + 3) << 8;
          if (len != (~nlen & 0xffff)) {
            v[0] = static_cast<uint32_t>(Status::kBadStoredLength);
          } else if (len > out_size - out_pos) {
            v[0] = static_cast<uint32_t>(Status::kOutputOverrun);
          } else if (start + 4 + len > br.size) {
            v[0] = static_cast<uint32_t>(Status::kTruncatedInput);
          } else {
            v[1] = static_cast<uint32_t>(start + 4);
            v[2] = len;
            br.pos = start + 4 + len;
            br.buf = 0;
            br.bits = 0;
          }
        }
      }
      hand_out(team, ws, v);
      if (v[0] != 0) return static_cast<Status>(v[0]);
      // Sixteen loads in flight per lane before their stores (the team's loads of one round are consecutive bytes).
      const uint8_t* from = br.data + v[1];
      constexpr uint32_t kUnroll = 16;
      for (uint32_t base = 0; base < v[2]; base += lanes * kUnroll) {
        uint32_t b[kUnroll];
        for (uint32_t u = 0; u < kUnroll; ++u) {
          const uint32_t j = base + u * lanes + lane;
          b[u] = j < v[2] ? load_u8(from + j) : 0;
        }
        for (uint32_t u = 0; u < kUnroll; ++u) {
          const uint32_t j = base + u * lanes + lane, p = out_pos + j;
          if (j < v[2]) {
            out[p] = static_cast<uint8_t>(b[u]);
            adler.add(b[u], out_size - p);
          }
        }
      }
      adler.reduce();
      out_pos += v[2];
      team.sync();
      continue;
    }
    if (type == 1) {
      if (!fixed_loaded) {
        for (uint32_t i = lane; i < 320; i += lanes) {
          ws.lens[i] = static_cast<uint8_t>(i < 144 ? 8 : i < 256 ? 9 : i < 280 ? 7 : i < 288 ? 8 : 5);
        }
        team.sync();
        build_code(team, ws.lens + 288, 32, 15, kDistBits, CodeKind::kDist, ws.dist, ws.dist_info, ws.dist_sorted);
        build_code(team, ws.lens, 288, 15, kLitlenBits, CodeKind::kLitlen, ws.litlen, ws.litlen_info, ws.litlen_sorted);
        build_pairs(team, ws);
        fixed_loaded = true;
      }
    } else {
      fixed_loaded = false;
      const Status header_status = read_dynamic_header(team, ws, br);
      if (header_status != Status::kOk) return header_status;
    }
    const Status block_status = decoder == PngHuffmanDecoder::kSpeculative
                                    ? inflate_huffman_block_spec(team, ws, br, out, out_size, out_pos, adler)
                                    : inflate_huffman_block(team, ws, br, out, out_size, out_pos, adler);
    if (block_status != Status::kOk) return block_status;
  }
  uint32_t end[2] = {0, 0};  // truncated, trailing input
  if (team.leader()) {
    const uint64_t consumed = br.consumed();
    end[0] = consumed > br.size * 8 ? 1 : 0;
    end[1] = (consumed + 7) / 8 != br.size ? 1 : 0;
  }
  hand_out(team, ws, end);
  if (end[0] != 0) return Status::kTruncatedInput;
  if (out_pos != out_size) return Status::kOutputShort;
  if (end[1] != 0) return Status::kTrailingInput;
  const uint32_t s1 = team.reduce_sum(static_cast<uint32_t>(adler.s1)) % kAdlerMod;
  const uint32_t s2 = team.reduce_sum(static_cast<uint32_t>(adler.s2)) % kAdlerMod;
  const uint32_t a = (1 + s1) % kAdlerMod, b = (out_size % kAdlerMod + s2) % kAdlerMod;
  const uint8_t* tail = in + in_size - 4;
  const uint32_t expected = load_u8(tail) << 24 | load_u8(tail + 1) << 16 | load_u8(tail + 2) << 8 | load_u8(tail + 3);
  return (b << 16 | a) == expected ? Status::kOk : Status::kAdlerMismatch;
}

}  // namespace mmserve::kernels::png_inflate
