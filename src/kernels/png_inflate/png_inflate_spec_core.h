// The speculative Huffman decoder (png_inflate_core.h's third part): the symbols of one Huffman block decoded by the
// whole warp at once, with the same output and status as the serial inflate_huffman_block.
//
// Design (speculative decoding with self-synchronisation, as in Weissenberger & Schmidt 2018, "Massively parallel
// Huffman decoding on GPUs"): the block's bit stream is cut into windows of kSpecLanes x kSpecLaneBits bits. Lane i
// decodes from bit base + i * kSpecLaneBits (a guess for all but lane 0) every symbol that starts before the next
// lane's guess, recording each (literal, or match length and distance) and the bit after its last one. Lane i's start
// is then corrected to lane i - 1's end and a lane whose start was wrong decodes again from there, only until it meets
// one of its old symbol boundaries (Huffman codes resynchronise within a few symbols; from there its old symbols are
// the true ones: spec_resync_lane). Usually one correction round and one round that changes nothing settle the
// window (at most kSpecLanes rounds, by induction from lane 0, whose start is the true one). A lane that reached the
// end-of-block or its record limit ends the window, as does the output limit (kSpecWindowOutput bytes). Every settled
// lane then knows its output offset (the lengths of the lanes before it), checks its symbols for faults on the true
// path (output overrun, distance too far, input past the end), writes its literals to the output (summing them into
// the Adler-32 apart, kept only when the window has no fault) and lists its matches; the team copies the matches in
// stream order, each with every lane (the serial decoder's copy_match). A window with a fault is decoded again by the
// serial decoder from the window's start, so every
// status is the serial decoder's, and no speculative lane's garbage can cause one (a speculative decode only reads:
// every codeword of a built table has a meaning, and bits past the end read as zeros).
//
// The per-lane steps run through team.for_lanes: on the GPU, lane i is thread i (WarpTeam); on the CPU one thread
// runs the kSpecLanes lanes in order (SerialTeam), between the same team.sync() points, each step touching only its
// own lane's state and reading what the previous step left, so the CPU test runs this very algorithm.
// Tests: png_inflate_test.cpp (equal to the serial decoder over every case), png_inflate_cuda_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/png_inflate/png_inflate_core.h"

namespace mmserve::kernels::png_inflate {

// One step of a lane's decode at br: two literals of a pair entry (when pair_ok; the second's codeword starts
// `second` bits in), one literal, or one match (length and distance with their extra bits), as records in r; 0 for
// the end-of-block.
MMSERVE_PNG_INLINE uint32_t decode_unit(const InflateWorkspace& ws, BitReader& br, bool pair_ok, uint32_t (&r)[2],
                                        uint32_t& second) {
  br.need(48);
  const uint32_t index = static_cast<uint32_t>(br.buf & ((1u << kLitlenBits) - 1));
  uint32_t e = ws.litlen_pairs[index];
  if (entry_kind(e) == kKindPair) {
    if (pair_ok) {
      br.drop(entry_len(e));
      r[0] = 1u << 16 | (entry_value(e) & 0xff);
      r[1] = 1u << 16 | entry_value(e) >> 8;
      second = entry_extra(e);
      return 2;
    }
    e = ws.litlen[index];
  }
  if (entry_len(e) == 0) e = decode_long(ws.litlen_info, ws.litlen_sorted, CodeKind::kLitlen, br.buf);
  br.drop(entry_len(e));
  const uint32_t kind = entry_kind(e);
  if (kind == kKindLiteral) {
    r[0] = 1u << 16 | entry_value(e);
    return 1;
  }
  if (kind == kKindEnd) return 0;
  const uint32_t length = entry_value(e) + br.pop(entry_extra(e));
  uint32_t d = ws.dist[br.buf & ((1u << kDistBits) - 1)];
  if (entry_len(d) == 0) d = decode_long(ws.dist_info, ws.dist_sorted, CodeKind::kDist, br.buf);
  br.drop(entry_len(d));
  r[0] = length << 16 | (entry_value(d) + br.pop(entry_extra(d)));
  return 1;
}

// Lane i's decode from bit `start` of every symbol beginning before bit `stop`, into ws.spec[i] and its records
// (and their boundaries, relative to the window's `base`).
MMSERVE_PNG_INLINE void spec_decode_lane(InflateWorkspace& ws, const uint8_t* data, uint64_t size, uint64_t base,
                                         uint64_t start, uint64_t stop, uint32_t i) {
  BitReader br{data, size, 0, 0, 0};
  br.seek(start);
  uint32_t* records = ws.spec_records + i;
  uint16_t* bounds = ws.spec_bounds + i;
  uint32_t count = 0, out_len = 0, matches = 0, stop_kind = kSpecStopNone;
  for (uint64_t at = start; at < stop; at = br.consumed()) {
    if (count == kSpecLaneSymbols) {
      stop_kind = kSpecStopFull;
      break;
    }
    uint32_t r[2], second = 0;
    const uint32_t n = decode_unit(ws, br, count + 2 <= kSpecLaneSymbols, r, second);
    if (n == 0) {
      stop_kind = kSpecStopEnd;
      break;
    }
    for (uint32_t u = 0; u < n; ++u) {
      records[(count + u) * kSpecLanes] = r[u];
      bounds[(count + u) * kSpecLanes] = static_cast<uint16_t>(at - base + (u == 0 ? 0 : second));
      out_len += r[u] >> 16;
      matches += r[u] >> 16 > 1 ? 1 : 0;
    }
    count += n;
  }
  SpecLane& lane = ws.spec[i];
  lane.start = start;
  lane.end = br.consumed();
  lane.first = 0;
  lane.count = count;
  lane.out_len = out_len;
  lane.matches = matches;
  lane.stop = stop_kind;
}

// Lane i decoded from the wrong bit; its predecessor says `want`. From there the decode usually meets one of the
// lane's old symbol boundaries within a few symbols (Huffman codes resynchronise), after which the old symbols are
// the right ones: only the new symbols before that point are decoded and recorded, just below the old ones that
// stay. Where no boundary is met within kSpecSyncSymbols symbols (or the new ones do not fit below), the lane is
// decoded afresh. Either way the lane then holds what spec_decode_lane from `want` would give (within the record
// limit, which only ends a window early).
MMSERVE_PNG_INLINE void spec_resync_lane(InflateWorkspace& ws, const uint8_t* data, uint64_t size, uint64_t base,
                                         uint64_t want, uint64_t stop, uint32_t i) {
  SpecLane& lane = ws.spec[i];
  const uint32_t first = lane.first, last = lane.first + lane.count;
  const uint16_t* bounds = ws.spec_bounds + i;
  BitReader br{data, size, 0, 0, 0};
  br.seek(want);
  uint32_t k = first, n = 0;
  bool synced = false;
  for (uint32_t step = 0; step < kSpecSyncSymbols; ++step) {
    const uint64_t at = br.consumed();
    if (at >= stop) break;
    while (k < last && base + bounds[k * kSpecLanes] < at) ++k;
    if (k == last) break;
    if (base + bounds[k * kSpecLanes] == at) {
      synced = true;
      break;
    }
    uint32_t r[2], second = 0;
    const uint32_t units = decode_unit(ws, br, true, r, second);
    if (units == 0) break;
    n += units;
  }
  if (!synced || n > k) {
    spec_decode_lane(ws, data, size, base, want, stop, i);
    return;
  }
  // The old records before the meeting point go; the n new ones take the places just below it.
  uint32_t out_len = lane.out_len, matches = lane.matches;
  for (uint32_t j = first; j < k; ++j) {
    const uint32_t length = ws.spec_records[j * kSpecLanes + i] >> 16;
    out_len -= length;
    matches -= length > 1 ? 1 : 0;
  }
  br.seek(want);
  for (uint32_t j = k - n; j < k;) {
    const uint64_t at = br.consumed();
    uint32_t r[2], second = 0;
    const uint32_t units = decode_unit(ws, br, true, r, second);
    if (units == 0) break;  // never: the walk above met no end-of-block in these symbols
    for (uint32_t u = 0; u < units; ++u, ++j) {
      ws.spec_records[j * kSpecLanes + i] = r[u];
      ws.spec_bounds[j * kSpecLanes + i] = static_cast<uint16_t>(at - base + (u == 0 ? 0 : second));
      out_len += r[u] >> 16;
      matches += r[u] >> 16 > 1 ? 1 : 0;
    }
  }
  lane.start = want;
  lane.first = k - n;
  lane.count = last - (k - n);
  lane.out_len = out_len;
  lane.matches = matches;
}

// The Huffman block at br (tables built), as inflate_huffman_block: the same output, out_pos and status. Every lane
// runs it (the CPU's SerialTeam plays all kSpecLanes lanes).
template <class Team>
MMSERVE_PNG_HD Status inflate_huffman_block_spec(Team& team, InflateWorkspace& ws, BitReader& br, uint8_t* out,
                                                 uint32_t out_size, uint32_t& out_pos, Adler& adler) {
  const uint32_t lane_id = team.lane(), lanes = team.size();
  uint32_t at[2] = {0, 0};
  if (team.leader()) {
    const uint64_t consumed = br.consumed();
    at[0] = static_cast<uint32_t>(consumed);
    at[1] = static_cast<uint32_t>(consumed >> 32);
  }
  hand_out(team, ws, at);
  const uint64_t limit = br.size * 8;
  uint64_t base = uint64_t{at[1]} << 32 | at[0];
  for (;;) {
    // Every lane from its guess; then corrections until no lane's start changes.
    team.for_lanes([&](uint32_t i) {
      spec_decode_lane(ws, br.data, br.size, base, base + uint64_t{i} * kSpecLaneBits,
                       base + uint64_t{i + 1} * kSpecLaneBits, i);
    });
    team.sync();
    for (;;) {
      team.for_lanes([&](uint32_t i) {
        // Behind a lane that ended the window nothing is this window's: such a lane keeps its start.
        // (Loops over all kSpecLanes with a predicate, here and below: fixed trip counts unroll, and the GPU's
        // shared-memory loads then overlap instead of forming a chain.)
        bool behind_stop = false;
        for (uint32_t j = 0; j < kSpecLanes; ++j) behind_stop |= j < i && ws.spec[j].stop != kSpecStopNone;
        ws.spec[i].want = i == 0 ? base : behind_stop ? ws.spec[i].start : ws.spec[i - 1].end;
      });
      team.sync();
      team.for_lanes([&](uint32_t i) {
        SpecLane& lane = ws.spec[i];
        lane.changed = lane.want != lane.start ? 1 : 0;
        if (lane.changed != 0) {
          spec_resync_lane(ws, br.data, br.size, base, lane.want, base + uint64_t{i + 1} * kSpecLaneBits, i);
        }
      });
      team.sync();
      uint32_t changed = 0;
      for (uint32_t j = 0; j < kSpecLanes; ++j) changed |= ws.spec[j].changed;
      team.sync();  // every lane has read the flags before the next round rewrites them
      if (changed == 0) break;
    }
    // The window: lanes up to the first that stopped, within the output and match limits (lane 0 always fits).
    uint32_t window_lanes = 0, window_out = 0, window_matches = 0;
    bool block_end = false;
    bool open = true;
    for (uint32_t j = 0; j < kSpecLanes; ++j) {
      const uint32_t out_len = ws.spec[j].out_len, matches = ws.spec[j].matches, stop = ws.spec[j].stop;
      open =
          open && (j == 0 || (window_out + out_len <= kSpecWindowOutput && window_matches + matches <= kSpecMatches));
      if (open) {
        window_out += out_len;
        window_matches += matches;
        window_lanes = j + 1;
        block_end = stop == kSpecStopEnd;
        open = stop == kSpecStopNone;
      }
    }
    const uint64_t window_end = ws.spec[window_lanes - 1].end;
    // Each settled lane: its literals written to the output (in bounds only) and summed apart (a faulted window's
    // sums go), its matches listed, its faults found.
    Adler literals;
    team.for_lanes([&](uint32_t i) {
      if (i >= window_lanes) return;
      uint32_t p = out_pos, m = 0;
      for (uint32_t j = 0; j < kSpecLanes; ++j) {
        p += j < i ? ws.spec[j].out_len : 0;
        m += j < i ? ws.spec[j].matches : 0;
      }
      SpecLane& lane = ws.spec[i];
      uint32_t fault = 0;
      for (uint32_t k = lane.first; k < lane.first + lane.count; ++k) {
        const uint32_t r = ws.spec_records[k * kSpecLanes + i], length = r >> 16;
        if (length == 1) {
          if (p >= out_size) {
            fault = 1;
            break;
          }
          out[p] = static_cast<uint8_t>(r);
          literals.add(r & 0xff, out_size - p);
        } else {
          if (p > out_size || length > out_size - p || (r & 0xffff) > p) {
            fault = 1;
            break;
          }
          ws.spec_match_pos[m] = p;
          ws.spec_match_val[m++] = r;
        }
        p += length;
      }
      lane.fault = fault;
    });
    team.sync();
    bool fault = window_end > limit;
    for (uint32_t j = 0; j < window_lanes; ++j) fault |= ws.spec[j].fault != 0;
    if (fault) {
      // The serial decoder finds the fault (and which one comes first) from the window's start; what this window
      // wrote is overwritten or, the image failing, unspecified.
      team.sync();
      br.seek(base);
      return inflate_huffman_block(team, ws, br, out, out_size, out_pos, adler);
    }
    adler.s1 += literals.s1;
    adler.s2 += literals.s2;
    for (uint32_t m = 0; m < window_matches; ++m) {
      const uint32_t p = ws.spec_match_pos[m], length = ws.spec_match_val[m] >> 16;
      copy_match(out, p, length, ws.spec_match_val[m] & 0xffff, lane_id, lanes, out_size, adler);
      team.sync();
    }
    team.sync();  // every lane has read this window's lane states before the next window rewrites them
    adler.reduce();
    out_pos += window_out;
    base = window_end;
    if (block_end) {
      br.seek(base);
      return Status::kOk;
    }
  }
}

}  // namespace mmserve::kernels::png_inflate
