// Online distillation of the adapter router (issue 16 item 5, SPEC 4.2): the gate head (gate_head.h) keeps learning
// from the traffic it serves, off the request path. Optional and off by default (mmserve.yaml options.gate_distill).
//
// The definition. For a request's embedding e (the gate's input, gate_head.h) and the N adapters the gate names:
//   - prototypes: p_j = the running mean of e over the requests that named adapter j explicitly (count n_j kept);
//     only the gate's adapters have one (a request naming another adapter is an unlabeled sample).
//   - the target: t_j = softmax_j(cos(e, p_j) / 0.07) over the adapters that have a prototype, t_j = 0 for the
//     others (the router learns not to pick an adapter nobody named yet). A sample whose target has fewer than 2
//     adapters with prototypes, or whose e or p_j is all zeros (no cosine), is skipped: a one-adapter "distribution"
//     says nothing about the choice between adapters. Targets are recomputed every round from the prototypes of
//     the time (they move as requests come in).
//   - the loss: KL(t || softmax(gate(e))), averaged over samples (GateHead::kl_divergence, torch's batchmean).
// Samples: every observed request (explicit or "auto"), the newest buffer_max kept; every holdout_every-th one is
// held apart (never trained on) to validate.
// A round (the trainer thread, or train_round() by hand): one epoch of mini-batch SGD over a shuffled copy of the
// training samples, each batch's gradient clipped to grad_norm_max (L2 over all parameters), lr in
// (0, kGateDistillLrMax]. The held-apart loss is measured before and after; if it rose (or is not finite) the round
// is rolled back (the head of before stays), else the new head replaces the snapshot requests read and the state
// is saved.
// State (state_dir): gate.safetensors + gate.json (GateHead::save) and prototypes.safetensors (`prototypes` f32
// [N, D], `counts` i64 [N], metadata `adapters`: the gate's names as JSON); saved after each kept round and when
// the distiller ends. At creation a saved head there replaces the configured one (it must take the same D and H
// and name the same adapters in the same order, else kFailedPrecondition: the directory belongs to another gate).
// One distiller per directory (an flock on state_dir/lock): a second (another replica) is kFailedPrecondition.
// Threads: observe() and head() are what requests call (a mutex, a push, a shared_ptr copy); the trainer thread
// (background) wakes every interval_ms, or once min_samples new samples arrived, and trains only when new samples
// came since its last round. The destructor stops and joins it.
// Tests: tests/unit/models/gate_distill_test.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "models/lora/gate_head.h"

namespace mmserve::models {

// The largest learning rate options accept: the gate's logits move by about lr * |grad|^2 per step, and a larger
// step on a 256-wide head turns the router into a one-adapter picker within a round.
inline constexpr double kGateDistillLrMax = 0.1;

struct GateDistillOptions {
  std::string state_dir;  // required: where the head and prototypes are saved and restored from
  double lr = 1e-3;       // in (0, kGateDistillLrMax]
  double temperature = 0.07;
  int64_t batch_size = 32;
  double grad_norm_max = 1.0;
  int64_t buffer_max = 2048;  // training samples kept (the oldest dropped)
  int64_t holdout_every = 5;  // >= 2
  int64_t holdout_max = 512;  // held-apart samples kept
  int64_t interval_ms = 60000;
  int64_t min_samples = 64;
  bool background = true;     // false: no trainer thread (train_round() by hand)
  bool lr_unbounded = false;  // tests only: accept lr above kGateDistillLrMax (the rollback test)
  uint64_t seed = 0x5eed;     // the rounds' shuffles
};

struct GateDistillStats {
  double train_loss = -1;    // the last round's mean mini-batch loss (before each step)
  double heldout_loss = -1;  // the held-apart loss of the head in use, as the last round measured it
  int64_t updates = 0, rollbacks = 0, rounds = 0;
  int64_t samples = 0;     // observed
  std::string save_error;  // the last failed save (empty: none)
};

struct GateDistillRound {
  bool trained = false;  // false: too few usable samples (no training sample or no held-apart one)
  bool rolled_back = false;
  double train_loss = 0, heldout_before = 0, heldout_after = 0;
  int64_t train_samples = 0, heldout_samples = 0;  // usable ones (with a target)
};

class GateDistiller {
 public:
  // kInvalidArgument for options out of range (naming the option), kFailedPrecondition for a state directory that
  // cannot be created or written, is in use, or holds another gate's state.
  static StatusOr<std::unique_ptr<GateDistiller>> create(const GateHead& configured, const GateDistillOptions& options);
  ~GateDistiller();
  GateDistiller(const GateDistiller&) = delete;
  GateDistiller& operator=(const GateDistiller&) = delete;

  // A request's embedding, and the adapter it named (empty: none, or "auto"). kInvalidArgument for an e of another
  // size than the gate's input.
  Status observe(std::vector<float> e, const std::string& adapter);
  // The head to route by now (replaced whole after each kept round; never modified in place).
  std::shared_ptr<const GateHead> head() const;
  // The target for e under the current prototypes (nullopt: fewer than two adapters with prototypes, or no cosine).
  std::optional<std::vector<float>> target(const std::vector<float>& e) const;
  GateDistillStats stats() const;
  // One round now, on the calling thread (serialised with the trainer's).
  StatusOr<GateDistillRound> train_round();
  // The head and prototypes into state_dir (serialised with rounds, which save after each kept one).
  Status save();

 private:
  GateDistiller() = default;
  Status restore(const GateHead& configured);
  Status write_state() const;  // save() without the round lock
  void trainer_loop();

  GateDistillOptions options_;
  std::vector<std::string> names_;
  int64_t d_ = 0, n_ = 0;
  int lock_fd_ = -1;

  mutable std::mutex mutex_;  // below, up to the trainer's fields
  std::shared_ptr<const GateHead> head_;
  std::vector<float> prototypes_;  // [N, D]
  std::vector<int64_t> counts_;    // [N]
  std::deque<std::vector<float>> train_, heldout_;
  int64_t new_samples_ = 0;
  GateDistillStats stats_;

  std::mutex round_mutex_;  // one round at a time
  uint64_t round_seed_ = 0;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread trainer_;
};

}  // namespace mmserve::models
