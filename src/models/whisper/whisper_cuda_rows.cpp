// WhisperCudaModel's decoder rows (see whisper_cuda.h): rows joining with their prompts (prefill), one token per
// row per step through the bucket's graph, and beam reorders of the caches; the forward itself is in whisper_cuda.cpp.
#include <algorithm>
#include <cstring>

#include "core/cuda/cuda_status.h"
#include "kernels/kv_cache/kv_cache_cuda.h"
#include "models/whisper/whisper_cuda_internal.h"

namespace mmserve::models {

using kernels::KvStorage;

// ------------------------------------------------------------------------------------ rows

StatusOr<std::unique_ptr<WhisperDecoderRows>> WhisperCudaModel::new_rows(int64_t capacity) {
  if (capacity < 1 || capacity > capacity_) {
    return invalid_argument("decoder capacity " + std::to_string(capacity) + " is outside 1.." +
                            std::to_string(capacity_) + " (this GPU model's capacity)");
  }
  if (rows_alive_) return failed_precondition("this GPU Whisper model already has live decoder rows");
  rows_alive_ = true;
  return std::unique_ptr<WhisperDecoderRows>(new Rows(this, capacity));
}

Status WhisperCudaModel::rows_prefill(Rows& rows, const Encoded& encoded, const std::vector<int64_t>& windows,
                                      const std::vector<std::vector<int32_t>>& prompts, std::vector<float>& logits,
                                      const std::vector<int64_t>& extra_positions, std::vector<float>* extra_logits) {
  const int64_t count = static_cast<int64_t>(prompts.size()), vocab = config_.vocab_size;
  const int64_t old_rows = rows.rows();
  if (static_cast<int64_t>(windows.size()) != count) {
    return invalid_argument("prefill(): " + std::to_string(windows.size()) + " windows for " + std::to_string(count) +
                            " prompts");
  }
  if (!extra_positions.empty() && (static_cast<int64_t>(extra_positions.size()) != count || !extra_logits)) {
    return invalid_argument("prefill(): extra_positions needs one entry per prompt and extra_logits");
  }
  if (old_rows + count > options_.max_batch) {
    return resource_exhausted("prefill(): " + std::to_string(old_rows + count) +
                              " decoder rows; this GPU model holds " + std::to_string(options_.max_batch) +
                              " (max_batch)");
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::vector<int32_t>& p = prompts[i];
    if (windows[i] < 0 || windows[i] >= encoded.windows_) {
      return invalid_argument("prefill(): window " + std::to_string(windows[i]) + " of an encoder output of " +
                              std::to_string(encoded.windows_));
    }
    if (p.empty() || static_cast<int64_t>(p.size()) > rows.capacity()) {
      return out_of_range("prefill(): a prompt of " + std::to_string(p.size()) + " tokens (1.." +
                          std::to_string(rows.capacity()) + ")");
    }
    for (int32_t id : p) {
      if (id < 0 || id >= vocab) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                std::to_string(vocab) + ")");
      }
    }
    if (!extra_positions.empty() && extra_positions[i] >= static_cast<int64_t>(p.size())) {
      return invalid_argument("prefill(): extra position " + std::to_string(extra_positions[i]) + " past the prompt");
    }
  }
  RETURN_IF_ERROR(set_cuda_device(options_.device));
  logits.assign(static_cast<size_t>(count * vocab), 0.0f);
  if (extra_logits) extra_logits->assign(extra_positions.empty() ? 0 : static_cast<size_t>(count * vocab), 0.0f);
  const size_t e = dtype_size(options_.dtype);
  const int64_t frames = encoded.frames_, d = config_.d_model;

  // Groups of consecutive prompts of one length run as one batch.
  for (int64_t g0 = 0; g0 < count;) {
    const int64_t n = static_cast<int64_t>(prompts[g0].size());
    int64_t g1 = g0 + 1;
    while (g1 < count && static_cast<int64_t>(prompts[g1].size()) == n) ++g1;
    const int64_t batch = g1 - g0, row0 = old_rows + g0;
    // Cross K/V of each row from its window; runs of consecutive windows in one GEMM when the rows are
    // contiguous in the cache (full-length windows) or go through quantize_kv (which takes any stride).
    const bool contiguous = frames == frames_max_ || options_.cross_kv != KvStorage::kSame;
    for (int64_t i = g0; i < g1;) {
      int64_t j = i + 1;
      while (contiguous && j < g1 && windows[j] == windows[j - 1] + 1) ++j;
      const void* src = static_cast<const char*>(encoded.data) + e * windows[i] * frames * d;
      RETURN_IF_ERROR(compute_cross_kv(old_rows + i, j - i, src, frames));
      i = j;
    }
    const bool extras = !extra_positions.empty();
    const int64_t logit_rows = extras ? 2 * batch : batch;
    // The int block (see Activations::ints): new rows start at position 0.
    const int64_t mb = options_.max_batch;
    int32_t* in = pinned_ints_.data_as<int32_t>();
    for (int64_t b = 0; b < batch; ++b) {
      in[b] = 0, in[mb + b] = static_cast<int32_t>(n), in[2 * mb + b] = static_cast<int32_t>(frames);
      in[3 * mb + b] = static_cast<int32_t>(b * n + n - 1);
      if (extras) {
        const int64_t p = extra_positions[g0 + b];
        in[3 * mb + batch + b] = static_cast<int32_t>(b * n + (p >= 0 ? p : n - 1));
      }
      std::copy(prompts[g0 + b].begin(), prompts[g0 + b].end(), in + 5 * mb + b * n);
    }
    RETURN_IF_ERROR(upload_inputs(batch * n));
    RETURN_IF_ERROR(decoder_forward(row0, batch, n, logit_rows));
    std::vector<float> out(static_cast<size_t>(logit_rows * vocab));
    RETURN_IF_ERROR(copy_logits(logit_rows, out.data()));
    std::copy(out.begin(), out.begin() + batch * vocab, logits.begin() + g0 * vocab);
    if (extras) {
      for (int64_t b = 0; b < batch; ++b) {
        if (extra_positions[g0 + b] < 0) continue;
        std::copy(out.begin() + (batch + b) * vocab, out.begin() + (batch + b + 1) * vocab,
                  extra_logits->begin() + (g0 + b) * vocab);
      }
    }
    g0 = g1;
  }
  for (int64_t i = 0; i < count; ++i) {
    rows.lengths.push_back(static_cast<int64_t>(prompts[i].size()));
    rows.frames.push_back(frames);
    rows.source.emplace_back(encoded.id, windows[i]);
  }
  return ok_status();
}

Status WhisperCudaModel::rows_step(Rows& rows, const std::vector<int32_t>& tokens, std::vector<float>& logits) {
  const int64_t n = rows.rows(), vocab = config_.vocab_size;
  if (static_cast<int64_t>(tokens.size()) != n) {
    return invalid_argument("step(): " + std::to_string(tokens.size()) + " tokens for " + std::to_string(n) + " rows");
  }
  logits.resize(static_cast<size_t>(n * vocab));
  if (n == 0) return ok_status();
  for (int64_t r = 0; r < n; ++r) {
    if (rows.lengths[r] >= rows.capacity()) {
      return out_of_range("step(): row " + std::to_string(r) + " is full (" + std::to_string(rows.capacity()) +
                          " tokens)");
    }
    if (tokens[r] < 0 || tokens[r] >= vocab) {
      return invalid_argument("token id " + std::to_string(tokens[r]) + " is outside the vocabulary (size " +
                              std::to_string(vocab) + ")");
    }
  }
  RETURN_IF_ERROR(set_cuda_device(options_.device));
  // Rows past n pad the bucket: position 0, one visible key, token 0 (they write rows no request holds).
  // Written straight into the pinned int block: no host allocation on this path.
  const int64_t bucket = bucket_for(n), mb = options_.max_batch;
  int32_t* in = pinned_ints_.data_as<int32_t>();
  for (int64_t r = 0; r < bucket; ++r) {
    const bool live = r < n;
    in[r] = live ? static_cast<int32_t>(rows.lengths[r]) : 0;
    in[mb + r] = live ? static_cast<int32_t>(rows.lengths[r] + 1) : 1;
    in[2 * mb + r] = live ? static_cast<int32_t>(rows.frames[r]) : 1;
    in[3 * mb + r] = static_cast<int32_t>(r);
    in[5 * mb + r] = live ? tokens[r] : 0;
  }
  RETURN_IF_ERROR(upload_inputs(bucket));
  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream_.get()));
  } else {
    RETURN_IF_ERROR(decoder_forward(0, bucket, 1, bucket));
  }
  RETURN_IF_ERROR(copy_logits(n, logits.data()));
  for (int64_t r = 0; r < n; ++r) ++rows.lengths[r];
  return ok_status();
}

Status WhisperCudaModel::rows_reorder(Rows& rows, const std::vector<int64_t>& src) {
  const int64_t old_rows = rows.rows(), count = static_cast<int64_t>(src.size());
  if (count > options_.max_batch) {
    return resource_exhausted("reorder(): " + std::to_string(count) + " rows; this GPU model holds " +
                              std::to_string(options_.max_batch));
  }
  bool identity = true, same_cross = true;
  int64_t used = 0, frames_used = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (src[i] < 0 || src[i] >= old_rows) {
      return invalid_argument("reorder(): row " + std::to_string(src[i]) + " of " + std::to_string(old_rows));
    }
    identity = identity && src[i] == i;
    same_cross = same_cross && i < old_rows && rows.source[src[i]] == rows.source[i];
    used = std::max(used, rows.lengths[src[i]]);
    frames_used = std::max(frames_used, rows.frames[src[i]]);
  }
  std::vector<int64_t> lengths(count), frames(count);
  std::vector<std::pair<int64_t, int64_t>> source(count);
  for (int64_t i = 0; i < count; ++i) {
    lengths[i] = rows.lengths[src[i]], frames[i] = rows.frames[src[i]], source[i] = rows.source[src[i]];
  }
  if (!identity && count > 0) {
    RETURN_IF_ERROR(set_cuda_device(options_.device));
    cudaStream_t s = stream_.get();
    const int64_t mb = options_.max_batch, d = attn_width_, heads = config_.decoder_attention_heads / tp_world_;
    const size_t e = dtype_size(options_.dtype);
    const size_t ce = options_.cross_kv == KvStorage::kSame ? e : 1;
    int32_t* index_host = pinned_ints_.data_as<int32_t>() + 5 * mb + mb * max_prefill_;
    int32_t* index = act_->ints + 5 * mb + mb * max_prefill_;
    for (int64_t i = 0; i < count; ++i) index_host[i] = static_cast<int32_t>(src[i]);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(index, index_host, sizeof(int32_t) * count, cudaMemcpyHostToDevice, s));
    auto gather = [&](void* base, size_t element, int64_t capacity, int64_t rows_used, int64_t width) {
      kernels::KvCacheGatherArgs g;
      g.src = base, g.dst = base, g.scratch = act_->gather_scratch, g.scratch_bytes = act_->gather_scratch_bytes;
      // batch_src is the whole pool: the indices name live rows, and an in-place gather needs batch <= batch_src
      // (beam search duplicates rows).
      g.element_bytes = element, g.batch = count, g.batch_src = options_.max_batch, g.capacity = capacity;
      g.rows = rows_used;
      g.width = width, g.src_index = index;
      return kernels::kv_cache_gather(g, s);
    };
    for (size_t l = 0; l < state_->self_k.size(); ++l) {
      if (used > 0) {
        RETURN_IF_ERROR(gather(state_->self_k[l], e, capacity_, used, d));
        RETURN_IF_ERROR(gather(state_->self_v[l], e, capacity_, used, d));
      }
      // Beams of one window share their cross K/V: only rows that changed windows move them.
      if (!same_cross) {
        RETURN_IF_ERROR(gather(state_->cross_k[l], ce, frames_max_, frames_used, d));
        RETURN_IF_ERROR(gather(state_->cross_v[l], ce, frames_max_, frames_used, d));
        if (state_->k_scale[l]) {
          RETURN_IF_ERROR(gather(state_->k_scale[l], sizeof(float), 1, 1, heads));
          RETURN_IF_ERROR(gather(state_->v_scale[l], sizeof(float), 1, 1, heads));
        }
      }
    }
    RETURN_IF_ERROR(stream_.synchronize());
  }
  rows.lengths = std::move(lengths), rows.frames = std::move(frames), rows.source = std::move(source);
  return ok_status();
}

}  // namespace mmserve::models
