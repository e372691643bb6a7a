// PNG IDAT streams -> RGB8 images: inflate (zlib, RFC 1950/1951), unfilter (PNG filter types 0-4) and convert to
// RGB as PIL's convert("RGB") does, for a batch of 8-bit, non-interlaced gray / gray+alpha / RGB / RGBA images.
//
// Contract, per image i of a batch (PngInflateImage): `streams + stream_offset` holds `stream_bytes` of one zlib
// stream (the IDAT data joined; frontends/image/png_device.h: split_png_for_device makes them). It must inflate to
// exactly height * (width * channels + 1) bytes of filtered rows, each a filter byte and width * channels samples;
// each row is unfiltered as libpng does (png_decode.cpp: unfilter_row) and converted to RGB8 HWC (gray replicated,
// alpha dropped: png_decode.cpp: convert_row) at `out + out_offset`; `scratch + scratch_offset` holds the filtered
// rows meanwhile (png_inflate_scratch_bytes each). status[i] is 0 (kOk) or the first fault found. The decode is
// strict: an image succeeds exactly when decode_png_fast's libdeflate call (libdeflate_zlib_decompress_ex, all input
// used, all output made) and unfiltering would, so that a caller can send every image with a nonzero status to
// libpng and get decode_png's answer bit for bit. libdeflate's own leniencies are kept: literal/length symbols 286
// and 287 mean length 258, distance symbols 30 and 31 mean 24577 + 13 extra bits, an empty code and a code of one
// 1-bit codeword are accepted (both codewords decode to its symbol), a code-length repeat may run past the last
// length; and zlib's window must be 32 KiB (CINFO 7), as decode_png_fast requires. Pixels of a failed image are
// unspecified.
// CPU twin: inflate_png_rows below (png_inflate_cpu.cpp); the decoder itself is png_inflate_core.h,
// png_inflate_spec_core.h and png_inflate_zlib_core.h, shared with the CUDA twin (png_inflate_cuda.h). Tests:
// png_inflate_test.cpp (against libdeflate and a naive unfilter), png_inflate_cuda_test.cpp (CUDA == CPU twin, byte for
// byte and status for status); bench: png_inflate_cuda_bench.cpp.
#pragma once

#include <cstdint>
#include <span>

namespace mmserve::kernels {

enum class PngInflateStatus : int32_t {
  kOk = 0,
  kBadZlibHeader = 1,    // not deflate, a window other than 32 KiB, a bad FCHECK, or a preset dictionary
  kBadBlockType = 2,     // BTYPE 3
  kBadStoredLength = 3,  // a stored block whose LEN is not the complement of NLEN
  kBadHuffmanCode = 4,   // code lengths: over-subscribed, incomplete (beyond libdeflate's two cases), repeat of nothing
  kBadSymbol = 5,        // reserved: libdeflate gives every codeword of a valid code a meaning (see the file comment)
  kDistanceTooFar = 6,   // a match reaching before the start of the output
  kOutputOverrun = 7,    // more output than the image's filtered rows
  kOutputShort = 8,      // the stream ended before all the filtered rows
  kTrailingInput = 9,    // bytes between the end of the deflate data and the Adler-32 (libdeflate's in_used != size)
  kAdlerMismatch = 10,   // the Adler-32 of the output is not the stream's
  kBadFilter = 11,       // a row filter type above 4
  kTruncatedInput = 12,  // the deflate data needs bits past its end (or the stream is shorter than 6 bytes)
  kBadImage = 13,        // the descriptor itself: channels not 1..4, an empty or oversized image, offsets outside
};

inline const char* png_inflate_status_name(PngInflateStatus status) {
  switch (status) {
    case PngInflateStatus::kOk: return "ok";
    case PngInflateStatus::kBadZlibHeader: return "bad zlib header";
    case PngInflateStatus::kBadBlockType: return "invalid block type";
    case PngInflateStatus::kBadStoredLength: return "bad stored block length";
    case PngInflateStatus::kBadHuffmanCode: return "bad Huffman code lengths";
    case PngInflateStatus::kBadSymbol: return "invalid symbol";
    case PngInflateStatus::kDistanceTooFar: return "distance too far back";
    case PngInflateStatus::kOutputOverrun: return "output overrun";
    case PngInflateStatus::kOutputShort: return "output short";
    case PngInflateStatus::kTrailingInput: return "trailing input";
    case PngInflateStatus::kAdlerMismatch: return "Adler-32 mismatch";
    case PngInflateStatus::kBadFilter: return "bad filter type";
    case PngInflateStatus::kTruncatedInput: return "truncated input";
    case PngInflateStatus::kBadImage: return "bad image descriptor";
  }
  return "unknown";
}

// How the symbols of a Huffman block are decoded; the same output and status either way. kSerial: one thread walks
// the bit stream (png_inflate_core.h). kSpeculative: the warp decodes 32 parts of it at once and resynchronises
// (png_inflate_spec_core.h); on the CPU one thread plays the 32 lanes, for the tests.
enum class PngHuffmanDecoder : int32_t { kSerial = 0, kSpeculative = 1 };

// One image of a batch. Offsets are in bytes from the start of the respective buffer.
struct PngInflateImage {
  uint64_t stream_offset = 0;
  uint64_t stream_bytes = 0;
  uint64_t out_offset = 0;      // width * height * 3 bytes of RGB8 HWC
  uint64_t scratch_offset = 0;  // png_inflate_scratch_bytes(width, height, channels) bytes
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;  // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  uint32_t reserved = 0;
};

// The largest image the decoder takes: its filtered rows must fit 32-bit positions.
inline constexpr uint64_t kPngInflateFilteredBytesMax = 0x7fffffffu;

// Bytes of scratch one image needs (its filtered rows), rounded up to 16 so that images laid out one after the
// other stay aligned. 0 for a shape the decoder refuses (kBadImage).
inline uint64_t png_inflate_scratch_bytes(uint64_t width, uint64_t height, uint64_t channels) {
  if (width == 0 || height == 0 || channels < 1 || channels > 4 || width > kPngInflateFilteredBytesMax ||
      height > kPngInflateFilteredBytesMax) {
    return 0;
  }
  const uint64_t filtered = height * (width * channels + 1);
  if (filtered > kPngInflateFilteredBytesMax) return 0;
  return (filtered + 15) / 16 * 16;
}

// Lays the images' scratch out one after the other (sets each scratch_offset) and returns the bytes the batch needs:
// what the caller allocates once for batches up to that size.
inline uint64_t png_inflate_assign_scratch(std::span<PngInflateImage> images) {
  uint64_t total = 0;
  for (PngInflateImage& image : images) {
    image.scratch_offset = total;
    total += png_inflate_scratch_bytes(image.width, image.height, image.channels);
  }
  return total;
}

// CPU twin, serial: for each image, what the contract above says; status[i] as a PngInflateStatus value. Host
// pointers. Precondition (checked, aborts): n >= 0 and non-null pointers when n > 0. A descriptor whose ranges fall
// outside the buffers is kBadImage (nothing written for it).
void inflate_png_rows(const uint8_t* streams, uint64_t streams_bytes, const PngInflateImage* images, int64_t n,
                      uint8_t* scratch, uint64_t scratch_bytes, uint8_t* out, uint64_t out_bytes, int32_t* status,
                      PngHuffmanDecoder decoder = PngHuffmanDecoder::kSerial);

}  // namespace mmserve::kernels
