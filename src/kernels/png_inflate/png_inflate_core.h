// The PNG decoder shared by the CPU twin (png_inflate_cpu.cpp) and the CUDA kernels (png_inflate_cuda.cu), first
// half: zlib inflate into the filtered rows, written once as __host__ __device__ templates over
// a "team" of threads (lane(), size(), leader(), sync(), sync_or(), reduce_sum(), for_lanes()). The CPU runs them with
// a team of one (SerialTeam below); the GPU with a warp for the inflate and a block for the rows. The contract (what
// succeeds, the status codes) is png_inflate.h's. This file: the bit reader, the workspace, the tables and the serial
// Huffman block decoder; png_inflate_spec_core.h the speculative one (the whole warp decodes a block's symbols);
// png_inflate_zlib_core.h the zlib layer over blocks (inflate_zlib).
//
// Inflate: the leader decodes the bit stream (64-bit bit buffer, table-driven Huffman decoding as libdeflate and
// zlib's inflate_fast do: a primary table of kLitlenBits / kDistBits bits per code, with two-literal entries where
// both codewords fit; the rare codewords longer than the table are decoded canonically from the per-length counts
// instead of subtables) into a batch of literals and
// matches; the team then writes the batch's literals in parallel, then copies its matches in order, each one by the
// whole team (a byte of a match is a function of bytes before the match alone, overlapping or not). Matches read the
// history from the output itself (global memory on the GPU, ordered by the team's sync): a ring of the 32 KiB window
// in shared memory would hold it closer, but at 64 KiB a warp (the ring must also hold a batch) it left room for two
// images per SM, and the encoder beside the decode then found no SM free (docs/perf/server_image_path.md,
// 2026-12-07: the decode's SM time, not its speed, was the limit). The Adler-32 is summed by
// every lane over the bytes it writes (weights from the expected output size, which is the only size that succeeds).
// Tables are built by the team: the leader counts and sorts the code lengths, the lanes fill the entries. A fault's
// status is the first in stream order (inflate_huffman_block), whichever decoder finds it.
// The rows' half (unfilter + convert) and the whole-image entry points are png_unfilter_core.h.
// Tests: png_inflate_test.cpp, png_inflate_cuda_test.cpp; tests/unit/frontends/image/png_fast_path_test.cpp and
// fuzz/png_fast_path_fuzz.cpp check the whole decode against decode_png_fast.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/png_inflate/png_inflate.h"

#if defined(__CUDACC__)
#define MMSERVE_PNG_HD __host__ __device__
#define MMSERVE_PNG_INLINE __host__ __device__ __forceinline__
#else
#define MMSERVE_PNG_HD
#define MMSERVE_PNG_INLINE inline
#endif

namespace mmserve::kernels::png_inflate {

using Status = PngInflateStatus;

inline constexpr uint32_t kLitlenBits = 11;  // libdeflate's choice: few codewords are longer
inline constexpr uint32_t kDistBits = 8;
inline constexpr uint32_t kPrecodeBits = 7;  // the longest code-length codeword: never a long code
inline constexpr uint32_t kBatchLiterals = 256;
inline constexpr uint32_t kBatchMatches = 64;
inline constexpr uint32_t kAdlerMod = 65521;

// ---- Decode table entries: value << 16 | kind << 9 | extra bits << 5 | codeword length (0: a long codeword). ----

inline constexpr uint32_t kKindLiteral = 0;  // also a code-length symbol
inline constexpr uint32_t kKindMatch = 1;    // a length (litlen code) or a distance (distance code)
inline constexpr uint32_t kKindEnd = 2;
inline constexpr uint32_t kKindPair = 3;  // two literals (value: first | second << 8; extra: the first's length)

enum class CodeKind { kPrecode, kLitlen, kDist };

MMSERVE_PNG_INLINE uint32_t make_entry(uint32_t kind, uint32_t value, uint32_t extra, uint32_t len) {
  return value << 16 | kind << 9 | extra << 5 | len;
}
MMSERVE_PNG_INLINE uint32_t entry_len(uint32_t e) {
  return e & 31;
}
MMSERVE_PNG_INLINE uint32_t entry_extra(uint32_t e) {
  return (e >> 5) & 15;
}
MMSERVE_PNG_INLINE uint32_t entry_kind(uint32_t e) {
  return (e >> 9) & 3;
}
MMSERVE_PNG_INLINE uint32_t entry_value(uint32_t e) {
  return e >> 16;
}

// RFC 1951's length and distance bases, computed (no tables to place in device memory); symbols 286-287 and 30-31
// mean what libdeflate makes of them (png_inflate.h).
MMSERVE_PNG_INLINE uint32_t symbol_entry(CodeKind kind, uint32_t sym, uint32_t len) {
  if (kind == CodeKind::kPrecode) return make_entry(kKindLiteral, sym, 0, len);
  if (kind == CodeKind::kLitlen) {
    if (sym < 256) return make_entry(kKindLiteral, sym, 0, len);
    if (sym == 256) return make_entry(kKindEnd, 0, 0, len);
    const uint32_t slot = sym - 257;
    if (slot < 8) return make_entry(kKindMatch, 3 + slot, 0, len);
    if (slot < 28) {
      const uint32_t extra = slot / 4 - 1;
      return make_entry(kKindMatch, ((4 + (slot & 3)) << extra) + 3, extra, len);
    }
    return make_entry(kKindMatch, 258, 0, len);
  }
  if (sym < 4) return make_entry(kKindMatch, sym + 1, 0, len);
  if (sym < 30) {
    const uint32_t extra = (sym >> 1) - 1;
    return make_entry(kKindMatch, ((2 + (sym & 1)) << extra) + 1, extra, len);
  }
  return make_entry(kKindMatch, 24577, 13, len);
}

// The order in which a dynamic block lists the code-length code's lengths: 16 17 18 0 8 7 9 6 10 5 11 4 12 3 13 2
// 14 1 15.
MMSERVE_PNG_INLINE uint32_t precode_order(uint32_t i) {
  if (i < 3) return 16 + i;
  const uint32_t j = i - 3, k = j >> 1;
  return (j & 1) ? 8 + k : (8 - k) & 7;
}

MMSERVE_PNG_INLINE uint32_t reverse_bits(uint32_t code, uint32_t len) {
#if defined(__CUDA_ARCH__)
  return __brev(code) >> (32 - len);
#else
  uint32_t r = 0;
  for (uint32_t i = 0; i < len; ++i, code >>= 1) r = (r << 1) | (code & 1);
  return r;
#endif
}

// ---- Input. ----

MMSERVE_PNG_INLINE uint32_t load_u8(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

// Little-endian 8 bytes at p. On the device two aligned words (the stream buffer is 8-byte aligned, so the word
// below p is inside it); the caller guarantees 16 readable bytes from p.
MMSERVE_PNG_INLINE uint64_t load_le64(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto* word = reinterpret_cast<const unsigned long long*>(at & ~uintptr_t{7});
  const uint32_t shift = static_cast<uint32_t>(at & 7) * 8;
  const uint64_t lo = __ldg(word), hi = __ldg(word + 1);
  return shift == 0 ? lo : (lo >> shift) | (hi << (64 - shift));
#else
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
#endif
}

// The deflate data's bits, least significant first. Bytes past the end read as zeros; consumed() then exceeds
// 8 * size, which is the truncation test (libdeflate's: implicit zero bytes may be loaded, never consumed).
struct BitReader {
  const uint8_t* data;
  uint64_t size;  // deflate bytes; 4 more (the Adler-32) follow, so 16-byte loads stay inside the stream
  uint64_t pos;   // next byte to load (past size: a virtual zero)
  uint64_t buf;
  uint32_t bits;  // valid bits in buf (bits above them are the true next input bits or zero)

  MMSERVE_PNG_INLINE void refill() {
    if (pos + 16 <= size + 4) {
      buf |= load_le64(data + pos) << bits;
      pos += (63 - bits) >> 3;
      bits |= 56;
    } else {
      while (bits <= 56) {
        const uint64_t byte = pos < size ? load_u8(data + pos) : 0;
        buf |= byte << bits;
        ++pos;
        bits += 8;
      }
    }
  }
  // At least n (<= 48) bits in buf afterwards.
  MMSERVE_PNG_INLINE void need(uint32_t n) {
    if (bits < n) refill();
  }
  MMSERVE_PNG_INLINE void drop(uint32_t n) {
    buf >>= n;
    bits -= n;
  }
  MMSERVE_PNG_INLINE uint32_t pop(uint32_t n) {
    const uint32_t v = static_cast<uint32_t>(buf & ((uint64_t{1} << n) - 1));
    drop(n);
    return v;
  }
  MMSERVE_PNG_INLINE uint64_t consumed() const { return pos * 8 - bits; }
  // Positions the reader at bit `bit` of the data (past the end: zeros).
  MMSERVE_PNG_INLINE void seek(uint64_t bit) {
    pos = bit >> 3;
    buf = 0;
    bits = 0;
    refill();
    drop(static_cast<uint32_t>(bit & 7));
  }
};

// ---- Workspace: what the team shares (shared memory on the GPU). ----

inline constexpr int32_t kCodeBad = 0, kCodeComplete = 1, kCodeFill = 2;

struct CodeInfo {
  uint16_t count[16];   // codewords of each length
  uint16_t offset[16];  // index in the sorted symbols of the first symbol of each length
  uint16_t first[16];   // canonical code of the first codeword of each length
  int32_t mode;         // kCodeBad, kCodeComplete, or kCodeFill: every entry is fill_entry (libdeflate's two cases)
  uint32_t fill_entry;
  uint32_t used;  // symbols with a codeword
};

// The speculative decoder's window (png_inflate_spec_core.h): kSpecLanes lanes of kSpecLaneBits bits each; a lane
// records at most kSpecLaneSymbols symbols, a window makes at most kSpecWindowOutput bytes
// in at most kSpecMatches matches. 256 bits hold ~47 symbols of the bench's literal-heavy pictures (~5.4 bits a
// byte); the record limit leaves room for denser parts (a full lane ends its window early, which costs only speed).
inline constexpr uint32_t kSpecLanes = 32;
inline constexpr uint32_t kSpecLaneBits = 256;
inline constexpr uint32_t kSpecLaneSymbols = 80;
inline constexpr uint32_t kSpecWindowOutput = 1u << 15;
inline constexpr uint32_t kSpecMatches = 512;
inline constexpr uint32_t kSpecSyncSymbols = 16;  // a corrected lane looks this far for its old symbols' boundaries

// One speculative lane's decode of its subsequence.
struct SpecLane {
  uint64_t start;  // bit where its decode began
  uint64_t end;    // bit after its last symbol
  uint64_t want;   // where it should have begun: its predecessor's end
  uint32_t first;  // index of its first record (a resynchronised lane keeps its old records where they were)
  uint32_t count;  // symbols recorded
  uint32_t out_len;
  uint32_t matches;
  uint32_t stop;  // kSpecStopEnd / kSpecStopFull: the lane ended before its subsequence did, so the window ends
  uint32_t changed;
  uint32_t fault;  // a fault on the true path (overrun, distance too far): the serial decoder reports it
};
inline constexpr uint32_t kSpecStopNone = 0, kSpecStopEnd = 1, kSpecStopFull = 2;

struct InflateWorkspace {
  uint32_t litlen[1u << kLitlenBits];
  uint32_t litlen_pairs[1u << kLitlenBits];  // litlen, with two-literal entries where both codewords fit
  uint32_t dist[1u << kDistBits];
  uint32_t precode[1u << kPrecodeBits];
  uint32_t lit_pos[kBatchLiterals];
  uint32_t match_pos[kBatchMatches];
  uint32_t match_val[kBatchMatches];  // length << 16 | distance
  uint32_t ctl[8];                    // what the leader hands to the team (hand_out)
  CodeInfo litlen_info, dist_info, precode_info;
  uint16_t litlen_sorted[288];
  uint16_t dist_sorted[32];
  uint16_t precode_sorted[20];
  uint8_t lit_val[kBatchLiterals];
  uint8_t lens[288 + 32 + 138];  // litlen then distance code lengths, with room for a repeat's overrun
  uint8_t precode_lens[20];
  SpecLane spec[kSpecLanes];
  // Symbol k of lane i at [k * kSpecLanes + i] (a warp's stores of one step fall in distinct banks): a match as
  // length << 16 | distance, a literal as 1 << 16 | byte, so that >> 16 is always the bytes it makes.
  uint32_t spec_records[kSpecLaneSymbols * kSpecLanes];
  uint16_t spec_bounds[kSpecLaneSymbols * kSpecLanes];  // the bit where each record's codeword starts, from the base
  uint32_t spec_match_pos[kSpecMatches];
  uint32_t spec_match_val[kSpecMatches];
};

// ---- The team of one. ----

struct SerialTeam {
  MMSERVE_PNG_INLINE uint32_t lane() const { return 0; }
  MMSERVE_PNG_INLINE uint32_t size() const { return 1; }
  MMSERVE_PNG_INLINE bool leader() const { return true; }
  MMSERVE_PNG_INLINE void sync() const {}
  MMSERVE_PNG_INLINE bool sync_or(bool p) const { return p; }
  MMSERVE_PNG_INLINE uint32_t reduce_sum(uint32_t v) const { return v; }
  // The speculative decoder's per-lane steps: this one thread plays the warp's kSpecLanes lanes in order.
  template <class F>
  MMSERVE_PNG_INLINE void for_lanes(F&& f) const {
    for (uint32_t i = 0; i < kSpecLanes; ++i) f(i);
  }
};

// The leader's N values to every lane of the team.
template <int N, class Team>
MMSERVE_PNG_INLINE void hand_out(Team& team, InflateWorkspace& ws, uint32_t (&v)[N]) {
  if (team.leader()) {
    for (int i = 0; i < N; ++i) ws.ctl[i] = v[i];
  }
  team.sync();
  for (int i = 0; i < N; ++i) v[i] = ws.ctl[i];
  team.sync();
}

// ---- Huffman tables. ----

// Builds the decode table of the code with lengths lens[0, n) (all <= max_len). False (in every lane) for lengths
// libdeflate refuses: over-subscribed, or incomplete other than empty or a single 1-bit codeword.
template <class Team>
MMSERVE_PNG_HD bool build_code(Team& team, const uint8_t* lens, uint32_t n, uint32_t max_len, uint32_t table_bits,
                               CodeKind kind, uint32_t* table, CodeInfo& info, uint16_t* sorted) {
  if (team.leader()) {
    uint32_t count[16] = {};
    for (uint32_t s = 0; s < n; ++s) ++count[lens[s]];
    uint32_t codespace = 0;  // in units of 2^-max_len
    for (uint32_t l = 1; l <= max_len; ++l) codespace = (codespace << 1) + count[l];
    const uint32_t full = 1u << max_len;
    info.mode = kCodeBad;
    if (codespace == full) {
      uint32_t next[16];
      uint32_t at = 0, code = 0;
      for (uint32_t l = 1; l < 16; ++l) {
        code = (code + (l > 1 ? count[l - 1] : 0)) << (l > 1 ? 1 : 0);
        info.count[l] = static_cast<uint16_t>(count[l]);
        info.offset[l] = static_cast<uint16_t>(at);
        info.first[l] = static_cast<uint16_t>(code);
        next[l] = at;
        at += count[l];
      }
      for (uint32_t s = 0; s < n; ++s) {
        if (lens[s] != 0) sorted[next[lens[s]]++] = static_cast<uint16_t>(s);
      }
      info.used = at;
      info.mode = kCodeComplete;
    } else if (codespace == 0) {
      info.fill_entry = symbol_entry(kind, 0, 1);
      info.mode = kCodeFill;
    } else if (codespace == full >> 1 && count[1] == 1) {
      uint32_t s = 0;
      while (lens[s] != 1) ++s;
      info.fill_entry = symbol_entry(kind, s, 1);
      info.mode = kCodeFill;
    }
  }
  team.sync();
  const int32_t mode = info.mode;
  const uint32_t entries = 1u << table_bits;
  if (mode == kCodeFill) {
    for (uint32_t i = team.lane(); i < entries; i += team.size()) table[i] = info.fill_entry;
  } else if (mode == kCodeComplete) {
    for (uint32_t k = team.lane(); k < info.used; k += team.size()) {
      const uint32_t sym = sorted[k], len = lens[sym];
      const uint32_t rev = reverse_bits(info.first[len] + (k - info.offset[len]), len);
      if (len <= table_bits) {
        const uint32_t e = symbol_entry(kind, sym, len);
        for (uint32_t j = rev; j < entries; j += 1u << len) table[j] = e;
      } else {
        table[rev & (entries - 1)] = 0;  // a long codeword's prefix: decode_long
      }
    }
  }
  team.sync();
  return mode != kCodeBad;
}

// A codeword longer than the table's bits, decoded canonically (zlib's puff) from the low bits of `bits`.
MMSERVE_PNG_INLINE uint32_t decode_long(const CodeInfo& info, const uint16_t* sorted, CodeKind kind, uint64_t bits) {
  int32_t code = 0, first = 0, index = 0;
  for (uint32_t len = 1; len <= 15; ++len) {
    code |= static_cast<int32_t>((bits >> (len - 1)) & 1);
    const int32_t count = info.count[len];
    if (code - first < count) return symbol_entry(kind, sorted[index + code - first], len);
    index += count;
    first = (first + count) << 1;
    code <<= 1;
  }
  return symbol_entry(kind, 0, 15);  // unreachable: long-codeword markers exist only in complete codes
}

// ---- Inflate. ----

struct Adler {
  uint64_t s1 = 0, s2 = 0;  // sums of b and of (n - position) * b over this lane's bytes, n the output size
  MMSERVE_PNG_INLINE void add(uint32_t b, uint32_t weight) {
    s1 += b;
    s2 += uint64_t{weight} * b;
  }
  MMSERVE_PNG_INLINE void reduce() {
    s1 %= kAdlerMod;
    s2 %= kAdlerMod;
  }
};

// The two-literal table: where an entry's codeword is a literal and the bits after it start another literal's
// codeword within the table's bits, both in one entry (literal-heavy streams decode twice as many symbols per
// lookup). The second lookup's index has zeros above the first codeword's bits; the second codeword lies below them.
template <class Team>
MMSERVE_PNG_HD void build_pairs(Team& team, InflateWorkspace& ws) {
  for (uint32_t i = team.lane(); i < (1u << kLitlenBits); i += team.size()) {
    uint32_t e = ws.litlen[i];
    const uint32_t len = entry_len(e);
    if (entry_kind(e) == kKindLiteral && len != 0 && len < kLitlenBits) {
      const uint32_t second = ws.litlen[i >> len];
      if (entry_kind(second) == kKindLiteral && entry_len(second) != 0 && len + entry_len(second) <= kLitlenBits) {
        // The first codeword's length in the extra bits' place: where the second literal starts (the speculative
        // decoder's symbol boundaries).
        e = make_entry(kKindPair, entry_value(e) | entry_value(second) << 8, len, len + entry_len(second));
      }
    }
    ws.litlen_pairs[i] = e;
  }
  team.sync();
}

// A dynamic block's header: the code-length code, the code lengths, the two tables.
template <class Team>
MMSERVE_PNG_HD Status read_dynamic_header(Team& team, InflateWorkspace& ws, BitReader& br) {
  uint32_t counts[2] = {0, 0};  // litlen, distance symbols
  if (team.leader()) {
    br.need(14);
    counts[0] = 257 + br.pop(5);
    counts[1] = 1 + br.pop(5);
    const uint32_t listed = 4 + br.pop(4);
    for (uint32_t i = 0; i < 19; ++i) ws.precode_lens[i] = 0;
    for (uint32_t i = 0; i < listed; ++i) {
      br.need(3);
      ws.precode_lens[precode_order(i)] = static_cast<uint8_t>(br.pop(3));
    }
  }
  hand_out(team, ws, counts);
  if (!build_code(team, ws.precode_lens, 19, 7, kPrecodeBits, CodeKind::kPrecode, ws.precode, ws.precode_info,
                  ws.precode_sorted)) {
    return Status::kBadHuffmanCode;
  }
  uint32_t failed[1] = {0};
  if (team.leader()) {
    const uint32_t total = counts[0] + counts[1];
    for (uint32_t i = 0; i < total;) {
      br.need(14);
      const uint32_t e = ws.precode[br.buf & ((1u << kPrecodeBits) - 1)];
      br.drop(entry_len(e));
      const uint32_t sym = entry_value(e);
      if (sym < 16) {
        ws.lens[i++] = static_cast<uint8_t>(sym);
        continue;
      }
      uint32_t repeat = 0, value = 0;
      if (sym == 16) {
        if (i == 0) {
          failed[0] = 1;
          break;
        }
        value = ws.lens[i - 1];
        repeat = 3 + br.pop(2);
      } else if (sym == 17) {
        repeat = 3 + br.pop(3);
      } else {
        repeat = 11 + br.pop(7);
      }
      for (uint32_t r = 0; r < repeat; ++r) ws.lens[i + r] = static_cast<uint8_t>(value);  // may overrun: room
      i += repeat;
    }
  }
  hand_out(team, ws, failed);
  if (failed[0] != 0) return Status::kBadHuffmanCode;
  if (!build_code(team, ws.lens + counts[0], counts[1], 15, kDistBits, CodeKind::kDist, ws.dist, ws.dist_info,
                  ws.dist_sorted) ||
      !build_code(team, ws.lens, counts[0], 15, kLitlenBits, CodeKind::kLitlen, ws.litlen, ws.litlen_info,
                  ws.litlen_sorted)) {
    return Status::kBadHuffmanCode;
  }
  build_pairs(team, ws);
  return Status::kOk;
}

// One match's bytes, out[p, p + length) from `distance` back, by the team's lanes (lane, lane + lanes, ...); each
// byte a function of bytes before p alone (an overlapping match repeats its last `distance` bytes), which earlier
// steps wrote and the team's sync published; each byte summed into the Adler-32.
MMSERVE_PNG_INLINE void copy_match(uint8_t* out, uint32_t p, uint32_t length, uint32_t distance, uint32_t lane,
                                   uint32_t lanes, uint32_t out_size, Adler& adler) {
  const uint32_t from = p - distance;
  for (uint32_t j = lane; j < length; j += lanes) {
    const uint32_t b = out[from + (distance >= length ? j : j % distance)];
    out[p + j] = static_cast<uint8_t>(b);
    adler.add(b, out_size - p - j);
  }
}

// One Huffman block's symbols, batch by batch, up to its end-of-block. out_pos (the same in every lane) advances.
template <class Team>
MMSERVE_PNG_HD Status inflate_huffman_block(Team& team, InflateWorkspace& ws, BitReader& br, uint8_t* out,
                                            uint32_t out_size, uint32_t& out_pos, Adler& adler) {
  const uint32_t lane = team.lane(), lanes = team.size();
  for (;;) {
    uint32_t v[5] = {0, 0, 0, 0, 0};  // status, literals, matches, end of block, output position after the batch
    if (team.leader()) {
      uint32_t literals = 0, matches = 0, pos = out_pos;
      Status status = Status::kOk;
      bool end = false;
      for (;;) {
        br.need(48);  // a litlen codeword, its extra bits, a distance codeword and its extra bits
        const uint32_t index = static_cast<uint32_t>(br.buf & ((1u << kLitlenBits) - 1));
        uint32_t e = ws.litlen_pairs[index];
        if (entry_kind(e) == kKindPair) {
          if (literals + 2 <= kBatchLiterals && out_size - pos >= 2) {
            br.drop(entry_len(e));
            ws.lit_pos[literals] = pos;
            ws.lit_val[literals] = static_cast<uint8_t>(entry_value(e));
            ws.lit_pos[literals + 1] = pos + 1;
            ws.lit_val[literals + 1] = static_cast<uint8_t>(entry_value(e) >> 8);
            pos += 2;
            literals += 2;
            if (literals == kBatchLiterals) break;
            continue;
          }
          e = ws.litlen[index];  // no room for both: the first alone
        }
        if (entry_len(e) == 0) e = decode_long(ws.litlen_info, ws.litlen_sorted, CodeKind::kLitlen, br.buf);
        br.drop(entry_len(e));
        const uint32_t kind = entry_kind(e);
        if (kind == kKindLiteral) {
          if (pos == out_size) {
            status = Status::kOutputOverrun;
            break;
          }
          ws.lit_pos[literals] = pos++;
          ws.lit_val[literals] = static_cast<uint8_t>(entry_value(e));
          if (++literals == kBatchLiterals) break;
          continue;
        }
        if (kind == kKindEnd) {
          end = true;
          break;
        }
        const uint32_t length = entry_value(e) + br.pop(entry_extra(e));
        if (length > out_size - pos) {
          status = Status::kOutputOverrun;
          break;
        }
        uint32_t d = ws.dist[br.buf & ((1u << kDistBits) - 1)];
        if (entry_len(d) == 0) d = decode_long(ws.dist_info, ws.dist_sorted, CodeKind::kDist, br.buf);
        br.drop(entry_len(d));
        const uint32_t distance = entry_value(d) + br.pop(entry_extra(d));
        if (distance > pos) {
          status = Status::kDistanceTooFar;
          break;
        }
        ws.match_pos[matches] = pos;
        ws.match_val[matches] = length << 16 | distance;
        pos += length;
        if (++matches == kBatchMatches) break;
      }
      // Truncation wins over a fault found after the input ran out (the zero bits past the end are no data): the
      // status is then the first fault in stream order whatever the batching, so the speculative decoder, which
      // cuts the stream differently, reports the same one.
      if (br.consumed() > br.size * 8) status = Status::kTruncatedInput;
      v[0] = static_cast<uint32_t>(status);
      v[1] = literals;
      v[2] = matches;
      v[3] = end ? 1 : 0;
      v[4] = pos;
    }
    hand_out(team, ws, v);
    if (v[0] != 0) return static_cast<Status>(v[0]);
    for (uint32_t i = lane; i < v[1]; i += lanes) {
      const uint32_t p = ws.lit_pos[i], b = ws.lit_val[i];
      out[p] = static_cast<uint8_t>(b);
      adler.add(b, out_size - p);
    }
    team.sync();
    for (uint32_t m = 0; m < v[2]; ++m) {
      const uint32_t p = ws.match_pos[m], length = ws.match_val[m] >> 16, distance = ws.match_val[m] & 0xffff;
      copy_match(out, p, length, distance, lane, lanes, out_size, adler);
      team.sync();
    }
    adler.reduce();
    out_pos = v[4];
    if (v[3] != 0) return Status::kOk;
  }
}

}  // namespace mmserve::kernels::png_inflate
