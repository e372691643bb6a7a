// CLIP on an NVIDIA GPU (see clip_cuda.h): the forward. It mirrors clip.cpp step by step; each step is one kernel
// or one cuBLASLt GEMM. Then the tensor-parallel all-reduces, the CUDA graphs per (tower, bucket), the encode entry
// points and the two-stage pipeline. Loading is clip_cuda.cpp, host pixels' way to the GPU clip_cuda_host_copy.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "kernels/activation/activation_cuda.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/embedding/embedding_cuda.h"
#include "kernels/l2_normalize/l2_normalize_cuda.h"
#include "kernels/layer_norm/layer_norm_cuda.h"
#include "kernels/patch_embed/patch_embed_cuda.h"
#include "kernels/pixel_levels/pixel_levels.h"
#include "kernels/pixel_levels/pixel_levels_cuda.h"
#include "models/clip/clip_cuda.h"
#include "models/clip/clip_cuda_internal.h"
#include "models/common/encoder_block_cuda.h"

namespace mmserve::models {

using kernels::GemmCudaArgs;

Status ClipCudaModel::reduce_residual(Rank& rank, int64_t rows, int64_t hidden) {
  if (!group_) return ok_status();
  return group_->collective()->all_reduce_sum(rank.index, rank.act->x, rows * hidden, DType::kF32, rank.stream.get());
}

Status ClipCudaModel::encoder_block(Rank& rank, const BlockWeights& w, int64_t rows, int64_t seq, int64_t batch,
                                    const TowerShape& shape, float eps, kernels::Activation activation, bool causal,
                                    const int32_t* kv_lengths) {
  const Activations& a = *rank.act;
  const EncoderBlockCudaBuffers buffers{a.x, a.normed, a.qkv, a.context, a.mlp};
  EncoderBlockCudaArgs args;
  args.rows = rows, args.seq = seq, args.batch = batch, args.eps = eps, args.activation = activation;
  args.causal = causal, args.kv_lengths = kv_lengths, args.dtype = options_.dtype;
  // Rank 0 adds its partial sums onto the residual stream (beta = 1); the other ranks overwrite their copy with
  // theirs (beta = 0), so the all-reduce that follows leaves x + the sum of every rank's part (tensor_parallel.h).
  args.residual_beta = rank.index == 0 ? 1.0f : 0.0f;
  if (group_) args.after_residual = [&] { return reduce_residual(rank, rows, shape.hidden); };
  const EncoderBlockCudaShape block_shape{shape.hidden, shape.heads, shape.head_dim, shape.mlp};
  return encoder_block_cuda(w, buffers, block_shape, args, *rank.gemm, rank.stream.get());
}

Status ClipCudaModel::vision_forward(Rank& rank, int64_t batch) {
  const ClipVisionConfig& v = config_.vision;
  const DType dt = options_.dtype;
  const Activations& a = *rank.act;
  const Weights& w = *rank.weights;
  cudaStream_t s = rank.stream.get();
  const int64_t patches = v.num_patches(), seq = patches + 1, hidden = v.hidden_size, rows = batch * seq;
  const int64_t patch_cols = v.num_channels * v.patch_size * v.patch_size;
  GemmCudaArgs g;
  kernels::LayerNormCudaArgs ln;
  if (rank.first_stage) {
    // Embeddings: [class; conv(pixels)] + positions, then pre_layrnorm (in place, f32).
    RETURN_IF_ERROR(
        kernels::im2col_patches_cuda(a.pixels, batch, v.num_channels, v.image_size, v.patch_size, a.patches, dt, s));
    g.m = batch * patches, g.n = hidden, g.k = patch_cols, g.a = a.patches, g.lda = patch_cols, g.w = w.patch_weight;
    g.ldw = patch_cols, g.in_dtype = dt, g.d = a.patch_out, g.ldd = hidden, g.out_dtype = DType::kF32;
    RETURN_IF_ERROR(rank.gemm->run(g, s));
    RETURN_IF_ERROR(kernels::assemble_vision_embeddings_cuda(a.patch_out, w.class_embedding, w.vision_positions, dt,
                                                             batch, patches, hidden, a.x, s));
    ln.x = a.x, ln.x_ld = hidden, ln.weight = w.pre_ln_w, ln.bias = w.pre_ln_b, ln.eps = v.layer_norm_eps;
    ln.rows = rows, ln.cols = hidden, ln.y = a.x, ln.y_dtype = DType::kF32, ln.y_ld = hidden;
    RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  }
  const TowerShape shape = vision_shape(rank.index);
  for (int64_t l = rank.vision_begin; l < rank.vision_end; ++l) {
    RETURN_IF_ERROR(encoder_block(rank, w.vision[l], rows, seq, batch, shape, v.layer_norm_eps, v.hidden_act,
                                  /*causal=*/false, /*kv_lengths=*/nullptr));
  }
  if (!rank.last_stage) return ok_status();
  // Pool the class tokens through post_layernorm (one gathered layer norm), then project.
  ln = kernels::LayerNormCudaArgs{};
  ln.x = a.x, ln.x_ld = hidden, ln.row_index = a.class_rows, ln.weight = w.post_ln_w, ln.bias = w.post_ln_b;
  ln.eps = v.layer_norm_eps, ln.rows = batch, ln.cols = hidden, ln.y = a.pooled, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  g = GemmCudaArgs{};
  g.m = batch, g.n = config_.projection_dim, g.k = hidden, g.a = a.pooled, g.lda = hidden, g.w = w.visual_projection;
  g.ldw = hidden, g.in_dtype = dt, g.d = a.embeds, g.ldd = config_.projection_dim, g.out_dtype = DType::kF32;
  return rank.gemm->run(g, s);
}

Status ClipCudaModel::text_forward(Rank& rank, int64_t batch) {
  const ClipTextConfig& t = config_.text;
  const DType dt = options_.dtype;
  const Activations& a = *rank.act;
  const Weights& w = *rank.weights;
  cudaStream_t s = rank.stream.get();
  const int64_t seq = t.max_position_embeddings, hidden = t.hidden_size, rows = batch * seq;
  const int32_t* ids = a.text_ints;
  const int32_t* lengths = ids + rows;
  const int32_t* pool_rows = lengths + batch;
  if (rank.first_stage) {
    RETURN_IF_ERROR(kernels::token_position_embedding_cuda(ids, batch, seq, w.token_embedding, w.text_positions, dt,
                                                           t.vocab_size, hidden, a.x, s));
  }
  const TowerShape shape = text_shape(rank.index);
  for (int64_t l = rank.text_begin; l < rank.text_end; ++l) {
    RETURN_IF_ERROR(encoder_block(rank, w.text[l], rows, seq, batch, shape, t.layer_norm_eps, t.hidden_act,
                                  /*causal=*/true, lengths));
  }
  if (!rank.last_stage) return ok_status();
  // final_layer_norm is per row, so only the pooled (EOS) rows need it: gather + normalise in one launch.
  kernels::LayerNormCudaArgs ln;
  ln.x = a.x, ln.x_ld = hidden, ln.row_index = pool_rows, ln.weight = w.final_ln_w, ln.bias = w.final_ln_b;
  ln.eps = t.layer_norm_eps, ln.rows = batch, ln.cols = hidden, ln.y = a.pooled, ln.y_dtype = dt, ln.y_ld = hidden;
  RETURN_IF_ERROR(kernels::layer_norm_cuda(ln, s));
  GemmCudaArgs g;
  g.m = batch, g.n = config_.projection_dim, g.k = hidden, g.a = a.pooled, g.lda = hidden, g.w = w.text_projection;
  g.ldw = hidden, g.in_dtype = dt, g.d = a.embeds, g.ldd = config_.projection_dim, g.out_dtype = DType::kF32;
  return rank.gemm->run(g, s);
}

Status ClipCudaModel::run_ranks(const std::function<Status(Rank&)>& body) {
  // A group of one still goes through the group: its health (an aborted group serves nothing) and its rank thread.
  if (!group_ && ranks_.size() == 1) return body(*ranks_[0]);
  if (!group_) {  // pipeline stages: independent, in turn
    for (std::unique_ptr<Rank>& rank : ranks_) {
      CUDA_RETURN_IF_ERROR(cudaSetDevice(rank->device));  // checked at load
      RETURN_IF_ERROR(body(*rank));
    }
    CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0]->device));
    return ok_status();
  }
  return group_->run([&](int r) { return body(*ranks_[r]); });
}

Status ClipCudaModel::capture_graphs() {
  // Eager runs first: they check every kernel accepts the shapes and let cuBLASLt choose (and us cache)
  // every algorithm, so the captures below make no heuristic calls. Under tensor parallel they also make NCCL
  // set up its connections before any capture.
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    for (int64_t bucket : buckets_) {
      RETURN_IF_ERROR(vision_forward(rank, bucket));
      RETURN_IF_ERROR(text_forward(rank, bucket));
    }
    return rank.stream.synchronize();
  }));
  if (!options_.use_graphs) return ok_status();
  // Each rank captures its own graphs (with its all-reduces) on its own thread; captures only record work, so
  // the ranks need not be in step here.
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    cudaStream_t s = rank.stream.get();
    size_t free_before = 0, free_after = 0, total = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_before, &total));
    for (int64_t bucket : buckets_) {
      for (Tower tower : {Tower::kVision, Tower::kText}) {
        cudaGraph_t graph = nullptr;
        CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        Status forward = tower == Tower::kVision ? vision_forward(rank, bucket) : text_forward(rank, bucket);
        const cudaError_t end = cudaStreamEndCapture(s, &graph);
        if (!forward.ok()) {
          if (graph) cudaGraphDestroy(graph);
          return forward.with_context("capturing the CUDA graph");
        }
        CUDA_RETURN_IF_ERROR(end);
        cudaGraphExec_t exec = nullptr;
        const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        CUDA_RETURN_IF_ERROR(instantiated);
        rank.graphs[{static_cast<int>(tower), bucket}] = exec;
        CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec, s));
      }
    }
    RETURN_IF_ERROR(rank.stream.synchronize());
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_after, &total));
    rank.graph_bytes = free_before > free_after ? free_before - free_after : 0;
    return ok_status();
  }));
  for (const std::unique_ptr<Rank>& rank : ranks_) memory_.graph_bytes += rank->graph_bytes;
  return ok_status();
}

int64_t ClipCudaModel::bucket_for(int64_t n) const {
  for (int64_t b : buckets_) {
    if (b >= n) return b;
  }
  return buckets_.back();
}

Status ClipCudaModel::launch(Rank& rank, Tower tower, int64_t bucket) {
  auto it = rank.graphs.find({static_cast<int>(tower), bucket});
  if (it != rank.graphs.end()) {
    CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, rank.stream.get()));
    return ok_status();
  }
  return tower == Tower::kVision ? vision_forward(rank, bucket) : text_forward(rank, bucket);
}

Status ClipCudaModel::run(Rank& rank, Tower tower, int64_t bucket, int64_t n, bool normalize) {
  cudaStream_t s = rank.stream.get();
  RETURN_IF_ERROR(launch(rank, tower, bucket));
  if (rank.index == 0) {  // every rank holds the same embeddings; rank 0's are the output
    const int64_t dim = config_.projection_dim;
    if (normalize) RETURN_IF_ERROR(kernels::l2_normalize_rows_cuda(rank.act->embeds, n, dim, s));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rank.pinned_out.data(), rank.act->embeds, n * dim * sizeof(float), cudaMemcpyDeviceToHost, s));
  }
  return rank.stream.synchronize();
}

Status ClipCudaModel::encode_images(const float* pixels, int64_t n, float* embeds, bool normalize) {
  const ClipVisionConfig& v = config_.vision;
  if (n < 0) return invalid_argument("negative image count");
  const std::span<const float> one(pixels, static_cast<size_t>(n * v.num_channels * v.image_size * v.image_size));
  return encode_images(std::span<const std::span<const float>>(&one, 1), embeds, normalize);
}

Status ClipCudaModel::encode_images(std::span<const std::span<const float>> pieces, float* embeds, bool normalize) {
  const ClipVisionConfig& v = config_.vision;
  const size_t image_floats = static_cast<size_t>(v.num_channels * v.image_size * v.image_size);
  size_t floats = 0;
  for (const std::span<const float>& piece : pieces) {
    if (piece.size() % image_floats != 0) {
      return invalid_argument("a piece of " + std::to_string(piece.size()) + " pixel values is not whole images of [" +
                              std::to_string(v.num_channels) + ", " + std::to_string(v.image_size) + ", " +
                              std::to_string(v.image_size) + "]");
    }
    floats += piece.size();
  }
  const int64_t n = static_cast<int64_t>(floats / image_floats);
  Rank& rank = *ranks_[0];
  if (n == 0 || n > max_batch()) return copy_and_encode_images(nullptr, cudaMemcpyHostToDevice, n, embeds, normalize);
  if (rank.pixel_staging.size() == 0) {
    // Tensor / pipeline parallel (every rank or stage copies the pixels itself): one contiguous host buffer.
    if (pieces.size() == 1)
      return copy_and_encode_images(pieces[0].data(), cudaMemcpyHostToDevice, n, embeds, normalize);
    std::vector<float> joined;
    joined.reserve(floats);
    for (const std::span<const float>& piece : pieces) joined.insert(joined.end(), piece.begin(), piece.end());
    return copy_and_encode_images(joined.data(), cudaMemcpyHostToDevice, n, embeds, normalize);
  }
  RETURN_IF_ERROR(copy_host_pixels(pieces, staged_host_copy_));
  RETURN_IF_ERROR(run(rank, Tower::kVision, bucket_for(n), n, normalize));
  std::memcpy(embeds, rank.pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::encode_image_levels(std::span<const std::span<const uint8_t>> pieces,
                                         std::span<const float> table, float* embeds, bool normalize) {
  const ClipVisionConfig& v = config_.vision;
  const int64_t channels = v.num_channels, plane = v.image_size * v.image_size;
  const size_t image_bytes = static_cast<size_t>(channels * plane);
  if (static_cast<int64_t>(table.size()) != channels * 256) {
    return invalid_argument("a level table of " + std::to_string(table.size()) + " values (the model takes " +
                            std::to_string(channels) + " x 256)");
  }
  size_t bytes = 0;
  for (const std::span<const uint8_t>& piece : pieces) {
    if (piece.size() % image_bytes != 0) {
      return invalid_argument("a piece of " + std::to_string(piece.size()) + " levels is not whole images of [" +
                              std::to_string(channels) + ", " + std::to_string(v.image_size) + ", " +
                              std::to_string(v.image_size) + "]");
    }
    bytes += piece.size();
  }
  const int64_t n = static_cast<int64_t>(bytes / image_bytes);
  Rank& rank = *ranks_[0];
  if (n == 0 || n > max_batch() || rank.levels == nullptr) {
    // Tensor / pipeline parallel (each rank copies floats itself), or a count the float path refuses: expand here.
    std::vector<float> values(bytes);
    float* to = values.data();
    for (const std::span<const uint8_t>& piece : pieces) {
      const int64_t images = static_cast<int64_t>(piece.size() / image_bytes);
      kernels::expand_pixel_levels(piece.data(), images, channels, plane, table.data(), to);
      to += piece.size();
    }
    const std::span<const float> joined(values);
    return encode_images(std::span<const std::span<const float>>(&joined, 1), embeds, normalize);
  }
  cudaStream_t s = rank.stream.get();
  if (!std::equal(table.begin(), table.end(), rank.level_table_uploaded.begin(), rank.level_table_uploaded.end())) {
    rank.level_table_uploaded.assign(table.begin(), table.end());
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.level_table, rank.level_table_uploaded.data(), table.size_bytes(),
                                         cudaMemcpyHostToDevice, s));
  }
  std::vector<std::span<const char>> byte_pieces;
  byte_pieces.reserve(pieces.size());
  for (const std::span<const uint8_t>& piece : pieces) {
    byte_pieces.emplace_back(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  RETURN_IF_ERROR(copy_host_bytes(byte_pieces, reinterpret_cast<char*>(rank.levels), staged_host_copy_));
  RETURN_IF_ERROR(kernels::expand_pixel_levels_cuda(rank.levels, n, channels, plane, rank.level_table,
                                                    rank.act->pixels, s));
  RETURN_IF_ERROR(run(rank, Tower::kVision, bucket_for(n), n, normalize));
  std::memcpy(embeds, rank.pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

bool ClipCudaModel::takes_device_levels() const { return ranks_.size() == 1 && ranks_[0]->levels != nullptr; }

Status ClipCudaModel::encode_image_levels_with(int64_t n, std::span<const float> table,
                                               const std::function<Status(uint8_t*, cudaStream_t)>& fill,
                                               float* embeds, bool normalize) {
  const ClipVisionConfig& v = config_.vision;
  if (!takes_device_levels()) {
    return unimplemented("device-side image levels need a single-rank CLIP model (no tensor or pipeline parallel)");
  }
  if (n < 1 || n > max_batch()) {
    return invalid_argument("image batch of " + std::to_string(n) + " (the GPU model takes 1.." +
                            std::to_string(max_batch()) + " per call)");
  }
  if (static_cast<int64_t>(table.size()) != v.num_channels * 256) {
    return invalid_argument("a level table of " + std::to_string(table.size()) + " values (the model takes " +
                            std::to_string(v.num_channels) + " x 256)");
  }
  Rank& rank = *ranks_[0];
  cudaStream_t s = rank.stream.get();
  if (!std::equal(table.begin(), table.end(), rank.level_table_uploaded.begin(), rank.level_table_uploaded.end())) {
    rank.level_table_uploaded.assign(table.begin(), table.end());
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.level_table, rank.level_table_uploaded.data(), table.size_bytes(),
                                         cudaMemcpyHostToDevice, s));
  }
  RETURN_IF_ERROR(fill(rank.levels, s));
  RETURN_IF_ERROR(kernels::expand_pixel_levels_cuda(rank.levels, n, v.num_channels, v.image_size * v.image_size,
                                                    rank.level_table, rank.act->pixels, s));
  RETURN_IF_ERROR(run(rank, Tower::kVision, bucket_for(n), n, normalize));
  std::memcpy(embeds, rank.pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::encode_images_on_device(const float* device_pixels, int64_t n, float* embeds, bool normalize) {
  // cudaMemcpyDefault: under tensor parallel the other ranks copy from rank 0's GPU.
  return copy_and_encode_images(device_pixels, cudaMemcpyDefault, n, embeds, normalize);
}

Status ClipCudaModel::copy_and_encode_images(const float* pixels, cudaMemcpyKind kind, int64_t n, float* embeds,
                                             bool normalize) {
  if (n < 0 || n > max_batch()) {
    return invalid_argument("image batch of " + std::to_string(n) + " (the GPU model takes 0.." +
                            std::to_string(max_batch()) + " per call)");
  }
  if (n == 0) return ok_status();
  const ClipVisionConfig& v = config_.vision;
  const size_t bytes = sizeof(float) * n * v.num_channels * v.image_size * v.image_size;
  if (pipelined()) {
    const int64_t image_floats = v.num_channels * v.image_size * v.image_size;
    Rank& stage0 = *ranks_[0];
    return run_pipeline(Tower::kVision, n, embeds, normalize, [&](int64_t, int64_t first, int64_t count) -> Status {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage0.act->pixels, pixels + first * image_floats,
                                           sizeof(float) * count * image_floats, cudaMemcpyDefault,
                                           stage0.stream.get()));
      return ok_status();
    });
  }
  const int64_t bucket = bucket_for(n);
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    if (pixels != rank.act->pixels) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rank.act->pixels, pixels, bytes, kind, rank.stream.get()));
    }
    return run(rank, Tower::kVision, bucket, n, normalize);
  }));
  std::memcpy(embeds, ranks_[0]->pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::encode_texts(const std::vector<std::vector<int32_t>>& ids, float* embeds, bool normalize) {
  const ClipTextConfig& t = config_.text;
  const int64_t n = static_cast<int64_t>(ids.size()), seq = t.max_position_embeddings;
  if (n > max_batch()) {
    return invalid_argument("text batch of " + std::to_string(n) + " (the GPU model takes 0.." +
                            std::to_string(max_batch()) + " per call)");
  }
  if (n == 0) return ok_status();
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int32_t>& row = ids[b];
    if (row.empty()) return invalid_argument("text " + std::to_string(b) + " has no tokens");
    if (static_cast<int64_t>(row.size()) > seq) {
      return invalid_argument("text " + std::to_string(b) + " has " + std::to_string(row.size()) +
                              " tokens; the model takes at most " + std::to_string(seq));
    }
    for (int32_t id : row) {
      if (id < 0 || id >= t.vocab_size) {
        return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                std::to_string(t.vocab_size) + ")");
      }
    }
  }
  // The layout text_forward reads for texts [first, first + count) in `bucket` rows: [bucket * seq ids | bucket
  // lengths | bucket pooling rows]; padding rows get one visible key (finite output) and pool their first token.
  auto fill = [&](int64_t first, int64_t count, int64_t bucket, int32_t* in) {
    const int64_t rows = bucket * seq;
    std::fill(in, in + rows + 2 * bucket, 0);
    for (int64_t b = 0; b < bucket; ++b) {
      in[rows + b] = 1;
      in[rows + bucket + b] = static_cast<int32_t>(b * seq);
    }
    for (int64_t b = 0; b < count; ++b) {
      const std::vector<int32_t>& row = ids[first + b];
      std::copy(row.begin(), row.end(), in + b * seq);
      in[rows + b] = static_cast<int32_t>(row.size());
      in[rows + bucket + b] = static_cast<int32_t>(b * seq + clip_pooling_position(row, t.eos_token_id));
    }
    return sizeof(int32_t) * (rows + 2 * bucket);
  };
  if (pipelined()) {
    // Every micro-batch's layout up front: both stages read it (lengths and pooling rows), each copying it on its
    // own stream when its previous micro-batch is done with the buffer.
    const int64_t micro = options_.text_micro_batch, chunks = (n + micro - 1) / micro;
    const int64_t stride = micro * seq + 2 * micro;
    int32_t* layouts = ranks_[0]->pinned_in.data_as<int32_t>();  // sized for max_batch() texts (plan_activations)
    std::vector<size_t> bytes(static_cast<size_t>(chunks));
    for (int64_t i = 0; i < chunks; ++i) {
      const int64_t count = std::min(micro, n - i * micro);
      bytes[i] = fill(i * micro, count, bucket_for(count), layouts + i * stride);
    }
    return run_pipeline(Tower::kText, n, embeds, normalize, [&](int64_t i, int64_t, int64_t) -> Status {
      for (const std::unique_ptr<Rank>& stage : ranks_) {
        CUDA_RETURN_IF_ERROR(cudaSetDevice(stage->device));
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage->act->text_ints, layouts + i * stride, bytes[i],
                                             cudaMemcpyHostToDevice, stage->stream.get()));
      }
      CUDA_RETURN_IF_ERROR(cudaSetDevice(ranks_[0]->device));
      return ok_status();
    });
  }
  const int64_t bucket = bucket_for(n);
  // Filled in rank 0's pinned staging; the other ranks copy it into theirs.
  int32_t* in = ranks_[0]->pinned_in.data_as<int32_t>();
  const size_t bytes = fill(0, n, bucket, in);
  RETURN_IF_ERROR(run_ranks([&](Rank& rank) -> Status {
    int32_t* staged = rank.pinned_in.data_as<int32_t>();
    if (staged != in) std::memcpy(staged, in, bytes);
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rank.act->text_ints, staged, bytes, cudaMemcpyHostToDevice, rank.stream.get()));
    return run(rank, Tower::kText, bucket, n, normalize);
  }));
  std::memcpy(embeds, ranks_[0]->pinned_out.data(), n * config_.projection_dim * sizeof(float));
  return ok_status();
}

Status ClipCudaModel::run_pipeline(Tower tower, int64_t n, float* embeds, bool normalize,
                                   const std::function<Status(int64_t, int64_t, int64_t)>& stage_input) {
  Rank& s0 = *ranks_[0];
  Rank& s1 = *ranks_[1];
  const bool vision = tower == Tower::kVision;
  const int64_t micro = vision ? options_.vision_micro_batch : options_.text_micro_batch;
  const int64_t seq = vision ? config_.vision.num_patches() + 1 : config_.text.max_position_embeddings;
  const int64_t hidden = vision ? config_.vision.hidden_size : config_.text.hidden_size;
  const int64_t dim = config_.projection_dim;
  for (int64_t i = 0, first = 0; first < n; ++i, first += micro) {
    const int64_t count = std::min(micro, n - first), bucket = bucket_for(count);
    // Stage 0: micro-batch i may overwrite its residual stream once stage 1 has copied micro-batch i - 1 out of it
    // (the overlap); without overlap, once stage 1 has finished it.
    CUDA_RETURN_IF_ERROR(cudaSetDevice(s0.device));
    if (i > 0) {
      CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(s0.stream.get(), options_.pipeline_overlap ? s1.copied.get() : s1.done.get(), 0));
    }
    RETURN_IF_ERROR(stage_input(i, first, count));
    RETURN_IF_ERROR(launch(s0, tower, bucket));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s0.done.get(), s0.stream.get()));
    // Stage 1: take the stream (one device-to-device copy, peer-to-peer across GPUs), run, emit the embeddings.
    CUDA_RETURN_IF_ERROR(cudaSetDevice(s1.device));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s1.stream.get(), s0.done.get(), 0));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s1.act->x, s0.act->x, sizeof(float) * bucket * seq * hidden, cudaMemcpyDefault,
                                         s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s1.copied.get(), s1.stream.get()));
    RETURN_IF_ERROR(launch(s1, tower, bucket));
    if (normalize) RETURN_IF_ERROR(kernels::l2_normalize_rows_cuda(s1.act->embeds, count, dim, s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s1.pinned_out.data_as<float>() + first * dim, s1.act->embeds,
                                         sizeof(float) * count * dim, cudaMemcpyDeviceToHost, s1.stream.get()));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s1.done.get(), s1.stream.get()));
  }
  RETURN_IF_ERROR(s1.stream.synchronize());
  CUDA_RETURN_IF_ERROR(cudaSetDevice(s0.device));
  RETURN_IF_ERROR(s0.stream.synchronize());
  std::memcpy(embeds, s1.pinned_out.data(), sizeof(float) * n * dim);
  return ok_status();
}

}  // namespace mmserve::models
