// Test-only: the cases png_inflate_test.cpp and png_inflate_cuda_test.cpp share, and the reference decoder.
//
// A case is a zlib stream plus the image shape it claims. Good streams come from real compressors (libdeflate at
// levels 0 / 1 / 6 / 12, zlib's compress2 and deflate with fixed-Huffman, Huffman-only, RLE and flushed multi-block
// output) over filtered rows made here from noise and from smooth gradients (long and overlapping matches) with every
// filter type; broken ones are built bit by bit (BitWriter) or mutated from good ones. The reference is what
// decode_png_fast does: libdeflate_zlib_decompress_ex (all input used, all output made, a 32 KiB window), then the
// five filters written naively from the PNG specification and PIL's convert("RGB").
#pragma once

#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/png_inflate/png_inflate.h"

namespace mmserve::kernels::png_inflate_test {

struct Case {
  std::string name;
  std::vector<uint8_t> zlib;
  uint32_t width = 0, height = 0, channels = 0;
  int32_t expect = -1;  // the status the decoder must give, or -1: success exactly when the reference succeeds
};

inline size_t filtered_size(uint32_t w, uint32_t h, uint32_t ch) {
  return size_t{h} * (size_t{w} * ch + 1);
}

// ---- Pixels and PNG's forward filters. ----

inline std::vector<uint8_t> noise_pixels(uint32_t w, uint32_t h, uint32_t ch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(size_t{w} * h * ch);
  for (uint8_t& v : px) v = static_cast<uint8_t>(rng());
  return px;
}

// Smooth, slowly varying rows: long matches, many of them overlapping (distance 1..bpp).
inline std::vector<uint8_t> gradient_pixels(uint32_t w, uint32_t h, uint32_t ch, uint32_t seed) {
  std::vector<uint8_t> px(size_t{w} * h * ch);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      for (uint32_t c = 0; c < ch; ++c) {
        px[(size_t{y} * w + x) * ch + c] = static_cast<uint8_t>((x / 8 + y / 4 + c * 40 + seed) % 256);
      }
    }
  }
  return px;
}

inline int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// Filtered rows of `px` (filter -1: a random type per row).
inline std::vector<uint8_t> filter_rows(const std::vector<uint8_t>& px, uint32_t w, uint32_t h, uint32_t ch, int filter,
                                        uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t row = size_t{w} * ch;
  std::vector<uint8_t> out;
  out.reserve(filtered_size(w, h, ch));
  for (uint32_t y = 0; y < h; ++y) {
    const int type = filter >= 0 ? filter : static_cast<int>(rng() % 5);
    out.push_back(static_cast<uint8_t>(type));
    const uint8_t* cur = px.data() + y * row;
    const uint8_t* prev = y > 0 ? cur - row : nullptr;
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= ch ? cur[i - ch] : 0, b = prev ? prev[i] : 0, c = prev && i >= ch ? prev[i - ch] : 0;
      const int pred = type == 1 ? a : type == 2 ? b : type == 3 ? (a + b) / 2 : type == 4 ? paeth(a, b, c) : 0;
      out.push_back(static_cast<uint8_t>(cur[i] - pred));
    }
  }
  return out;
}

inline std::vector<uint8_t> to_rgb(const std::vector<uint8_t>& px, uint32_t w, uint32_t h, uint32_t ch) {
  std::vector<uint8_t> rgb(size_t{w} * h * 3);
  for (size_t p = 0; p < size_t{w} * h; ++p) {
    for (uint32_t c = 0; c < 3; ++c) rgb[3 * p + c] = px[p * ch + (ch >= 3 ? c : 0)];
  }
  return rgb;
}

// ---- Compressors. ----

inline std::vector<uint8_t> libdeflate_zlib(const std::vector<uint8_t>& data, int level) {
  libdeflate_compressor* c = libdeflate_alloc_compressor(level);
  std::vector<uint8_t> out(libdeflate_zlib_compress_bound(c, data.size()));
  out.resize(libdeflate_zlib_compress(c, data.data(), data.size(), out.data(), out.size()));
  libdeflate_free_compressor(c);
  return out;
}

// zlib's deflate; sync_every > 0 flushes (Z_SYNC_FLUSH: an empty stored block) after every that many bytes.
inline std::vector<uint8_t> zlib_deflate(const std::vector<uint8_t>& data, int level, int strategy,
                                         size_t sync_every = 0, int window_bits = 15) {
  z_stream z{};
  deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, strategy);
  // Each flush may start a new block with its own trees: room for those.
  std::vector<uint8_t> out(deflateBound(&z, data.size()) + 64 +
                           (sync_every ? (data.size() / sync_every + 1) * 400 : 0));
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const size_t piece = sync_every > 0 ? sync_every : std::max<size_t>(data.size(), 1);
  for (size_t pos = 0; pos < data.size(); pos += piece) {
    z.next_in = const_cast<uint8_t*>(data.data()) + pos;
    z.avail_in = static_cast<uInt>(std::min(piece, data.size() - pos));
    deflate(&z, Z_SYNC_FLUSH);
  }
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline std::vector<uint8_t> zlib_compress2(const std::vector<uint8_t>& data, int level) {
  uLongf size = compressBound(data.size());
  std::vector<uint8_t> out(size);
  compress2(out.data(), &size, data.data(), data.size(), level);
  out.resize(size);
  return out;
}

// ---- Hand-made streams. ----

// Deflate bits, least significant first; Huffman codewords most significant bit first (RFC 1951 3.1.1).
struct BitWriter {
  std::vector<uint8_t> bytes;
  uint64_t acc = 0;
  int n = 0;
  void put(uint32_t v, int bits) {
    for (int i = 0; i < bits; ++i) {
      acc |= uint64_t{(v >> i) & 1} << n;
      if (++n == 8) bytes.push_back(static_cast<uint8_t>(acc)), acc = 0, n = 0;
    }
  }
  void put_code(uint32_t code, int len) {
    for (int i = len - 1; i >= 0; --i) put((code >> i) & 1, 1);
  }
  void align() {
    if (n > 0) bytes.push_back(static_cast<uint8_t>(acc)), acc = 0, n = 0;
  }
};

// The canonical codewords of a code with these lengths (RFC 1951 3.2.2).
inline std::vector<uint32_t> canonical_codes(const std::vector<uint8_t>& lens) {
  uint32_t count[16] = {}, next[16] = {};
  for (uint8_t l : lens) ++count[l];
  count[0] = 0;
  for (int l = 1, code = 0; l < 16; ++l) next[l] = code = (code + count[l - 1]) << 1;
  std::vector<uint32_t> codes(lens.size());
  for (size_t s = 0; s < lens.size(); ++s) codes[s] = lens[s] ? next[lens[s]]++ : 0;
  return codes;
}

// Fixed Huffman litlen codewords (RFC 1951 3.2.6).
inline void put_fixed_litlen(BitWriter& bw, uint32_t sym) {
  if (sym < 144)
    bw.put_code(0x30 + sym, 8);
  else if (sym < 256)
    bw.put_code(0x190 + sym - 144, 9);
  else if (sym < 280)
    bw.put_code(sym - 256, 7);
  else
    bw.put_code(0xc0 + sym - 280, 8);
}

// A dynamic block header: the code lengths as (precode symbol, extra bits) items under a precode with lengths
// `pre` (indexed by symbol), HLIT / HDIST as given.
struct LengthItem {
  uint32_t sym, extra;
};
inline void put_dynamic_header(BitWriter& bw, bool final_block, uint32_t hlit, uint32_t hdist,
                               const std::vector<uint8_t>& pre, const std::vector<LengthItem>& items) {
  static const int kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
  bw.put(final_block ? 1 : 0, 1);
  bw.put(2, 2);
  bw.put(hlit - 257, 5);
  bw.put(hdist - 1, 5);
  bw.put(19 - 4, 4);
  for (int i = 0; i < 19; ++i) bw.put(pre[kOrder[i]], 3);
  const std::vector<uint32_t> codes = canonical_codes(pre);
  for (const LengthItem& item : items) {
    bw.put_code(codes[item.sym], pre[item.sym]);
    if (item.sym == 16) bw.put(item.extra, 2);
    if (item.sym == 17) bw.put(item.extra, 3);
    if (item.sym == 18) bw.put(item.extra, 7);
  }
}

// A complete precode for code lengths up to 13: 0..13 and 16 at 4 bits, 17 and 18 at 5 bits.
inline std::vector<uint8_t> simple_precode() {
  std::vector<uint8_t> pre(19, 0);
  for (int s = 0; s <= 13; ++s) pre[s] = 4;
  pre[16] = 4;
  pre[17] = pre[18] = 5;
  return pre;
}
inline std::vector<LengthItem> plain_items(const std::vector<uint8_t>& lens) {
  std::vector<LengthItem> items;
  for (size_t i = 0; i < lens.size();) {
    size_t run = 0;
    while (i + run < lens.size() && lens[i + run] == 0 && run < 138) ++run;
    if (run >= 11) {
      items.push_back({18, static_cast<uint32_t>(run - 11)});
      i += run;
    } else if (run >= 3) {
      items.push_back({17, static_cast<uint32_t>(run - 3)});
      i += run;
    } else {
      items.push_back({lens[i], 0});
      ++i;
    }
  }
  return items;
}

inline uint32_t adler32_of(const std::vector<uint8_t>& data) {
  return static_cast<uint32_t>(adler32(adler32(0, nullptr, 0), data.data(), static_cast<uInt>(data.size())));
}

// zlib's header (32 KiB window, default level) + deflate bytes + the Adler-32 of `output`.
inline std::vector<uint8_t> zlib_wrap(const std::vector<uint8_t>& deflate, const std::vector<uint8_t>& output) {
  std::vector<uint8_t> out(2 + deflate.size());
  out[0] = 0x78, out[1] = 0x9c;
  std::copy(deflate.begin(), deflate.end(), out.begin() + 2);
  const uint32_t a = adler32_of(output);
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(a >> s));
  return out;
}

// ---- The reference: decode_png_fast's inflate, the naive filters, PIL's conversion. ----

struct Decoded {
  bool ok = false;
  std::vector<uint8_t> rgb;
};

inline Decoded reference_decode(const std::vector<uint8_t>& zlib, uint32_t w, uint32_t h, uint32_t ch) {
  Decoded d;
  if (zlib.size() < 2 || (zlib[0] >> 4) != 7) return d;
  const size_t size = filtered_size(w, h, ch), row = size_t{w} * ch;
  std::vector<uint8_t> f(size);
  libdeflate_decompressor* dec = libdeflate_alloc_decompressor();
  size_t in_used = 0, out_made = 0;
  const libdeflate_result r =
      libdeflate_zlib_decompress_ex(dec, zlib.data(), zlib.size(), f.data(), size, &in_used, &out_made);
  libdeflate_free_decompressor(dec);
  if (r != LIBDEFLATE_SUCCESS || in_used != zlib.size() || out_made != size) return d;
  std::vector<uint8_t> px(size_t{w} * h * ch);
  for (uint32_t y = 0; y < h; ++y) {
    const uint8_t type = f[y * (row + 1)];
    const uint8_t* in = f.data() + y * (row + 1) + 1;
    uint8_t* cur = px.data() + y * row;
    const uint8_t* prev = y > 0 ? cur - row : nullptr;
    if (type > 4) return d;
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= ch ? cur[i - ch] : 0, b = prev ? prev[i] : 0, c = prev && i >= ch ? prev[i - ch] : 0;
      int pred = 0;
      switch (type) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: pred = paeth(a, b, c); break;
        default: break;
      }
      cur[i] = static_cast<uint8_t>(in[i] + pred);
    }
  }
  d.ok = true;
  d.rgb = to_rgb(px, w, h, ch);
  return d;
}

// ---- The case lists. ----

// Good streams: shapes (1x1, 1xN, Nx1, odd widths) x channels x content x filters x compressors.
inline std::vector<Case> good_cases() {
  std::vector<Case> cases;
  const std::pair<uint32_t, uint32_t> shapes[] = {{1, 1}, {1, 37}, {29, 1}, {7, 5}, {31, 17}, {64, 33}, {201, 3}};
  uint32_t seed = 1;
  for (auto [w, h] : shapes) {
    for (uint32_t ch = 1; ch <= 4; ++ch) {
      for (int content = 0; content < 2; ++content) {
        for (int filter = -1; filter <= 4; ++filter) {
          if (filter >= 0 && content == 0 && w * h > 40) continue;  // single-filter runs: the gradients suffice
          const std::vector<uint8_t> px = content == 0 ? noise_pixels(w, h, ch, seed) : gradient_pixels(w, h, ch, seed);
          const std::vector<uint8_t> f = filter_rows(px, w, h, ch, filter, seed++);
          const std::string base = std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(ch) +
                                   (content ? " gradient" : " noise") + " filter " + std::to_string(filter);
          const auto add = [&](const std::string& how, std::vector<uint8_t> z) {
            cases.push_back({base + " " + how, std::move(z), w, h, ch});
          };
          for (int level : {0, 1, 6, 12}) add("libdeflate " + std::to_string(level), libdeflate_zlib(f, level));
          if (filter == -1) {
            add("compress2 6", zlib_compress2(f, 6));
            add("zlib fixed", zlib_deflate(f, 6, Z_FIXED));
            add("zlib huffman-only", zlib_deflate(f, 6, Z_HUFFMAN_ONLY));
            add("zlib rle", zlib_deflate(f, 9, Z_RLE));
            add("zlib flushed blocks", zlib_deflate(f, 1, Z_DEFAULT_STRATEGY, 50));
          }
        }
      }
    }
  }
  // Server-sized images: many blocks, long matches, 32 KiB distances.
  for (uint32_t ch : {3u, 4u}) {
    const std::vector<uint8_t> noise = filter_rows(noise_pixels(224, 224, ch, 7), 224, 224, ch, -1, 7);
    const std::vector<uint8_t> smooth = filter_rows(gradient_pixels(224, 224, ch, 8), 224, 224, ch, -1, 8);
    const std::string s = "224x224x" + std::to_string(ch);
    cases.push_back({s + " noise compress2 6", zlib_compress2(noise, 6), 224, 224, ch});
    cases.push_back({s + " gradient compress2 6", zlib_compress2(smooth, 6), 224, 224, ch});
    cases.push_back({s + " gradient libdeflate 12", libdeflate_zlib(smooth, 12), 224, 224, ch});
    cases.push_back({s + " gradient zlib fixed", zlib_deflate(smooth, 9, Z_FIXED), 224, 224, ch});
  }
  return cases;
}

// Streams built bit by bit: libdeflate's leniencies (expect -1: the reference decides) and one of each fault.
inline std::vector<Case> edge_cases() {
  std::vector<Case> cases;
  // One row of gray bytes, filter type 0: the output's first byte must be 0.
  const auto one_row = [&](const std::string& name, const BitWriter& bw, const std::vector<uint8_t>& output,
                           int32_t expect) {
    cases.push_back({name, zlib_wrap(bw.bytes, output), static_cast<uint32_t>(output.size() - 1), 1, 1, expect});
  };
  const auto fixed_start = [](BitWriter& bw) {
    bw.put(1, 1);
    bw.put(1, 2);
  };
  for (uint32_t sym : {285u, 286u, 287u}) {  // length 258 (285), and what libdeflate makes of 286 and 287
    BitWriter bw;
    fixed_start(bw);
    put_fixed_litlen(bw, 0);
    put_fixed_litlen(bw, sym);
    bw.put_code(0, 5);  // distance 1
    put_fixed_litlen(bw, 256);
    bw.align();
    one_row("fixed length symbol " + std::to_string(sym), bw, std::vector<uint8_t>(259, 0), -1);
  }
  for (uint32_t sym : {29u, 30u, 31u}) {  // distance 24577 (29), and libdeflate's 30 and 31
    BitWriter bw;
    fixed_start(bw);
    put_fixed_litlen(bw, 0);
    for (int i = 0; i < 96; ++i) {
      put_fixed_litlen(bw, 285);
      bw.put_code(0, 5);
    }
    put_fixed_litlen(bw, 257);
    bw.put_code(sym, 5);
    bw.put(0, 13);
    put_fixed_litlen(bw, 256);
    bw.align();
    one_row("fixed distance symbol " + std::to_string(sym), bw, std::vector<uint8_t>(1 + 96 * 258 + 3, 0), -1);
  }
  const std::vector<uint8_t> pre = simple_precode();
  const auto dynamic = [&](BitWriter& bw, std::vector<uint8_t> litlen, std::vector<uint8_t> dist) {
    std::vector<uint8_t> all = litlen;
    all.insert(all.end(), dist.begin(), dist.end());
    put_dynamic_header(bw, true, static_cast<uint32_t>(litlen.size()), static_cast<uint32_t>(dist.size()), pre,
                       plain_items(all));
  };
  {  // An empty distance code and a match anyway: libdeflate decodes distance 1 from one bit.
    std::vector<uint8_t> litlen(258, 0);
    litlen[0] = 2, litlen[256] = 2, litlen[257] = 1;  // codewords: 257 "0", 0 "10", 256 "11"
    BitWriter bw;
    dynamic(bw, litlen, {0});
    bw.put_code(2, 2);
    bw.put_code(0, 1);
    bw.put(0, 1);
    bw.put_code(3, 2);
    bw.align();
    one_row("empty distance code with a match", bw, std::vector<uint8_t>(4, 0), -1);
  }
  for (uint32_t bit : {0u, 1u}) {  // a stored block, then a block whose only codeword is its end (1 bit, 0 or 1)
    BitWriter bw;
    bw.put(0, 3);
    bw.align();
    for (uint8_t b : {4, 0, 0xfb, 0xff, 0, 1, 2, 3}) bw.bytes.push_back(b);
    std::vector<uint8_t> litlen(257, 0);
    litlen[256] = 1;
    dynamic(bw, litlen, {0});
    bw.put(bit, 1);
    bw.align();
    one_row("one 1-bit codeword, bit " + std::to_string(bit), bw, {0, 1, 2, 3}, -1);
  }
  {  // The last code-length repeat runs past HLIT + HDIST.
    std::vector<uint8_t> litlen(257, 0);
    litlen[0] = 1, litlen[256] = 1;
    std::vector<uint8_t> all = litlen;
    all.push_back(0);
    std::vector<LengthItem> items = plain_items(litlen);
    items.push_back({17, 0});  // three zeros where one is left
    BitWriter bw;
    put_dynamic_header(bw, true, 257, 1, pre, items);
    for (int i = 0; i < 3; ++i) bw.put_code(0, 1);
    bw.put_code(1, 1);
    bw.align();
    one_row("code-length repeat past the end", bw, std::vector<uint8_t>(3, 0), -1);
  }
  const auto bad_code = [&](const std::string& name, std::vector<uint8_t> litlen, std::vector<LengthItem> items) {
    BitWriter bw;
    if (items.empty()) {
      dynamic(bw, litlen, {1, 1});
    } else {
      put_dynamic_header(bw, true, static_cast<uint32_t>(litlen.size()), 2, pre, items);
    }
    bw.put(0, 16);
    bw.align();
    one_row(name, bw, std::vector<uint8_t>(3, 0), static_cast<int32_t>(PngInflateStatus::kBadHuffmanCode));
  };
  {
    std::vector<uint8_t> incomplete(257, 0), over(257, 0);
    incomplete[0] = 2, incomplete[256] = 2;
    over[0] = 1, over[1] = 1, over[256] = 1;
    bad_code("incomplete litlen code", incomplete, {});
    bad_code("over-subscribed litlen code", over, {});
    bad_code("repeat with nothing before it", over, {{16, 0}});
  }
  {
    BitWriter bw;
    fixed_start(bw);
    put_fixed_litlen(bw, 0);
    put_fixed_litlen(bw, 257);
    bw.put_code(1, 5);  // distance 2, one byte out
    put_fixed_litlen(bw, 256);
    bw.align();
    one_row("distance too far back", bw, std::vector<uint8_t>(4, 0),
            static_cast<int32_t>(PngInflateStatus::kDistanceTooFar));
  }
  {
    BitWriter bw;
    bw.put(1, 1);
    bw.put(3, 2);
    bw.put(0, 13);
    bw.align();
    one_row("block type 3", bw, std::vector<uint8_t>(4, 0), static_cast<int32_t>(PngInflateStatus::kBadBlockType));
  }
  for (int variant = 0; variant < 2; ++variant) {  // LEN != ~NLEN; LEN beyond the input
    BitWriter bw;
    bw.put(1, 3);
    bw.align();
    const uint32_t len = variant == 0 ? 4 : 100, nlen = variant == 0 ? (~4u & 0xffff) ^ 1 : ~100u & 0xffff;
    for (uint32_t b : {len & 0xff, len >> 8, nlen & 0xff, nlen >> 8}) bw.bytes.push_back(static_cast<uint8_t>(b));
    for (int i = 0; i < 10; ++i) bw.bytes.push_back(0);
    one_row(
        variant == 0 ? "stored LEN != ~NLEN" : "stored block past the input", bw, std::vector<uint8_t>(len, 0),
        static_cast<int32_t>(variant == 0 ? PngInflateStatus::kBadStoredLength : PngInflateStatus::kTruncatedInput));
  }
  // Faults of a real stream.
  const std::vector<uint8_t> f = filter_rows(gradient_pixels(11, 6, 2, 4), 11, 6, 2, -1, 4);
  const std::vector<uint8_t> good = zlib_compress2(f, 6);
  const auto variant = [&](const std::string& name, std::vector<uint8_t> z, uint32_t h, PngInflateStatus expect) {
    cases.push_back({name, std::move(z), 11, h, 2, static_cast<int32_t>(expect)});
  };
  variant("good", good, 6, PngInflateStatus::kOk);
  std::vector<uint8_t> z = good;
  z.back() ^= 1;
  variant("wrong Adler-32", z, 6, PngInflateStatus::kAdlerMismatch);
  z = good;
  z.insert(z.end() - 4, 0x00);
  variant("a byte between the data and the Adler-32", z, 6, PngInflateStatus::kTrailingInput);
  z = good;
  z.push_back(0x55);
  variant("a byte after the Adler-32", z, 6, PngInflateStatus::kTrailingInput);
  variant("one row more than the stream", good, 7, PngInflateStatus::kOutputShort);
  variant("one row less than the stream", good, 5, PngInflateStatus::kOutputOverrun);
  std::vector<uint8_t> bad_filter = f;
  bad_filter[3 * (11 * 2 + 1)] = 5;
  variant("filter type 5 in row 3", zlib_compress2(bad_filter, 6), 6, PngInflateStatus::kBadFilter);
  variant("5 bytes", std::vector<uint8_t>(good.begin(), good.begin() + 5), 6, PngInflateStatus::kTruncatedInput);
  for (auto [cmf, flg, what] : {std::tuple<int, int, const char*>{0x77, 0x00, "CM 7"},
                                {0x68, 0x00, "CINFO 6"},
                                {0x78, 0x9d, "FCHECK"},
                                {0x78, 0xbb, "FDICT"}}) {
    z = good;
    z[0] = static_cast<uint8_t>(cmf);
    z[1] = static_cast<uint8_t>(flg);
    if (flg == 0) z[1] = static_cast<uint8_t>((31 - (cmf * 256) % 31) % 31);  // a right FCHECK
    variant(std::string("zlib header: ") + what, z, 6, PngInflateStatus::kBadZlibHeader);
  }
  return cases;
}

// A small valid case to break: 9x4 RGB gradient rows, random filters, zlib level 6.
inline Case small_case() {
  const std::vector<uint8_t> f = filter_rows(gradient_pixels(9, 4, 3, 3), 9, 4, 3, -1, 3);
  return {"small", zlib_compress2(f, 6), 9, 4, 3};
}

// Random mutations of good streams: bit flips, byte writes, truncations, insertions and deletions.
inline std::vector<Case> mutated_cases(uint32_t seed, size_t count) {
  std::mt19937 rng(seed);
  std::vector<Case> bases;
  for (uint32_t ch : {1u, 3u, 4u}) {
    const std::vector<uint8_t> smooth = filter_rows(gradient_pixels(13, 6, ch, ch), 13, 6, ch, -1, ch);
    const std::vector<uint8_t> noise = filter_rows(noise_pixels(5, 7, ch, ch), 5, 7, ch, -1, ch);
    bases.push_back({"smooth", zlib_compress2(smooth, 6), 13, 6, ch});
    bases.push_back({"smooth fixed", zlib_deflate(smooth, 6, Z_FIXED), 13, 6, ch});
    bases.push_back({"noise", libdeflate_zlib(noise, 6), 5, 7, ch});
    bases.push_back({"stored", libdeflate_zlib(noise, 0), 5, 7, ch});
  }
  std::vector<Case> cases;
  for (size_t i = 0; i < count; ++i) {
    Case c = bases[rng() % bases.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !c.zlib.empty(); ++e) {
      const size_t at = rng() % c.zlib.size();
      switch (rng() % 6) {
        case 0:
        case 1: c.zlib[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: c.zlib[at] = static_cast<uint8_t>(rng()); break;
        case 3: c.zlib.resize(at); break;
        case 4: c.zlib.insert(c.zlib.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng())); break;
        default: c.zlib.erase(c.zlib.begin() + static_cast<std::ptrdiff_t>(at)); break;
      }
    }
    // Half the time a right Adler-32 for what the mutated deflate data inflates to, so that the decoder's deeper
    // decisions (odd codes, distances, lengths) decide, not the checksum.
    if (i % 2 == 0 && c.zlib.size() > 6) {
      std::vector<uint8_t> data(filtered_size(c.width, c.height, c.channels));
      libdeflate_decompressor* dec = libdeflate_alloc_decompressor();
      size_t used = 0, made = 0;
      if (libdeflate_deflate_decompress_ex(dec, c.zlib.data() + 2, c.zlib.size() - 6, data.data(), data.size(), &used,
                                           &made) == LIBDEFLATE_SUCCESS) {
        data.resize(made);
        const uint32_t a = adler32_of(data);
        for (int k = 0; k < 4; ++k) c.zlib[c.zlib.size() - 4 + k] = static_cast<uint8_t>(a >> (24 - 8 * k));
      }
      libdeflate_free_decompressor(dec);
    }
    c.name = "mutation " + std::to_string(i) + " of " + c.name + " ch " + std::to_string(c.channels);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace mmserve::kernels::png_inflate_test
