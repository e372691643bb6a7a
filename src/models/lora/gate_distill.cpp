// The gate head's online distillation (see gate_distill.h).
#include "models/lora/gate_distill.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/safetensors.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

// t_j = softmax_j(cos(e, p_j) / temperature) over the prototypes with a count, 0 elsewhere (gate_distill.h).
std::optional<std::vector<float>> target_of(const float* e, const std::vector<float>& prototypes,
                                            const std::vector<int64_t>& counts, int64_t d, double temperature) {
  const int64_t n = static_cast<int64_t>(counts.size());
  double e_norm = 0;
  for (int64_t c = 0; c < d; ++c) e_norm += static_cast<double>(e[c]) * e[c];
  if (!(e_norm > 0)) return std::nullopt;
  std::vector<double> scaled(static_cast<size_t>(n), 0.0);
  std::vector<bool> has(static_cast<size_t>(n), false);
  int64_t usable = 0;
  double top = -1e300;
  for (int64_t j = 0; j < n; ++j) {
    if (counts[j] == 0) continue;
    const float* p = prototypes.data() + j * d;
    double dot = 0, p_norm = 0;
    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(e[c]) * p[c], p_norm += static_cast<double>(p[c]) * p[c];
    if (!(p_norm > 0)) continue;
    scaled[j] = dot / std::sqrt(e_norm * p_norm) / temperature;
    has[j] = true;
    top = std::max(top, scaled[j]);
    ++usable;
  }
  if (usable < 2) return std::nullopt;
  std::vector<float> t(static_cast<size_t>(n), 0.0f);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (has[j]) sum += (scaled[j] = std::exp(scaled[j] - top));
  }
  for (int64_t j = 0; j < n; ++j) {
    if (has[j]) t[j] = static_cast<float>(scaled[j] / sum);
  }
  return t;
}

// Samples with a target, as the two row-major matrices kl_divergence() takes.
struct Batch {
  std::vector<float> e, t;
  int64_t rows = 0;
};

Batch usable(const std::vector<std::vector<float>>& samples, const std::vector<float>& prototypes,
             const std::vector<int64_t>& counts, int64_t d, double temperature) {
  Batch b;
  for (const std::vector<float>& e : samples) {
    std::optional<std::vector<float>> t = target_of(e.data(), prototypes, counts, d, temperature);
    if (!t) continue;
    b.e.insert(b.e.end(), e.begin(), e.end());
    b.t.insert(b.t.end(), t->begin(), t->end());
    ++b.rows;
  }
  return b;
}

Status check_options(const GateDistillOptions& o) {
  if (o.state_dir.empty()) return invalid_argument("gate distillation needs a state directory (gate_distill_dir)");
  if (!(o.lr > 0) || (!o.lr_unbounded && o.lr > kGateDistillLrMax)) {
    char text[96];
    std::snprintf(text, sizeof text, "gate_distill_lr %g: must be in (0, %g]", o.lr, kGateDistillLrMax);
    return invalid_argument(std::string(text) + " (a larger SGD step wrecks the router in a round)");
  }
  if (!(o.temperature > 0) || o.batch_size < 1 || !(o.grad_norm_max > 0) || o.buffer_max < 1 || o.holdout_every < 2 ||
      o.holdout_max < 1 || o.interval_ms < 1 || o.min_samples < 1) {
    return invalid_argument(
        "gate distillation options: temperature and grad_norm_max > 0, batch_size, buffer_max, "
        "holdout_max, interval_ms and min_samples >= 1, holdout_every >= 2");
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<GateDistiller>> GateDistiller::create(const GateHead& configured,
                                                               const GateDistillOptions& options) {
  RETURN_IF_ERROR(check_options(options));
  std::unique_ptr<GateDistiller> g(new GateDistiller());
  g->options_ = options;
  g->names_ = configured.adapters();
  g->d_ = configured.input_dim();
  g->n_ = static_cast<int64_t>(g->names_.size());
  g->round_seed_ = options.seed;
  std::error_code ec;
  fs::create_directories(options.state_dir, ec);
  if (ec) return failed_precondition("gate_distill_dir " + options.state_dir + ": cannot create: " + ec.message());
  const std::string lock_path = (fs::path(options.state_dir) / "lock").string();
  g->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (g->lock_fd_ < 0) return failed_precondition(lock_path + ": cannot open: " + std::strerror(errno));
  if (::flock(g->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return failed_precondition("gate_distill_dir " + options.state_dir +
                               " is in use by another distiller (one per directory: a model with several instances "
                               "cannot distil into one directory)");
  }
  RETURN_IF_ERROR(g->restore(configured));
  RETURN_IF_ERROR(g->save());  // a directory we cannot write fails the load, not the first round
  if (options.background) g->trainer_ = std::thread([raw = g.get()] { raw->trainer_loop(); });
  return g;
}

GateDistiller::~GateDistiller() {
  if (trainer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    trainer_.join();
  }
  if (head_) (void)save().ok();  // the prototypes since the last kept round; a failure has nowhere to go now
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status GateDistiller::restore(const GateHead& configured) {
  // head_ is set last: the destructor saves only a distiller that restored (never over another gate's files).
  const fs::path dir(options_.state_dir);
  std::shared_ptr<const GateHead> head = std::make_shared<const GateHead>(configured);
  prototypes_.assign(static_cast<size_t>(n_ * d_), 0.0f);
  counts_.assign(static_cast<size_t>(n_), 0);
  const std::string other = ": it holds another gate's state (remove it or point gate_distill_dir elsewhere)";
  if (fs::exists(dir / "gate.safetensors")) {
    ASSIGN_OR_RETURN(GateHead saved, GateHead::load((dir / "gate.safetensors").string()));
    if (saved.input_dim() != d_ || saved.hidden_dim() != configured.hidden_dim() || saved.adapters() != names_) {
      return failed_precondition(options_.state_dir + other);
    }
    head = std::make_shared<const GateHead>(std::move(saved));
  }
  const std::string path = (dir / "prototypes.safetensors").string();
  if (!fs::exists(path)) {
    head_ = std::move(head);
    return ok_status();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(path));
  const TensorInfo* p = file->find("prototypes");
  const TensorInfo* c = file->find("counts");
  const auto names = file->metadata().find("adapters");
  if (names == file->metadata().end() || names->second != nlohmann::json(names_).dump()) {
    return failed_precondition(path + other);
  }
  if (p == nullptr || c == nullptr || p->dtype != DType::kF32 || c->dtype != DType::kI64 ||
      p->shape != std::vector<int64_t>{n_, d_} || c->shape != std::vector<int64_t>{n_}) {
    return failed_precondition(path + ": expected prototypes f32 [" + std::to_string(n_) + ", " + std::to_string(d_) +
                               "] and counts i64 [" + std::to_string(n_) + "]");
  }
  std::memcpy(prototypes_.data(), p->data, p->nbytes);
  std::memcpy(counts_.data(), c->data, c->nbytes);
  for (int64_t v : counts_) {
    if (v < 0) return failed_precondition(path + ": a negative count");
  }
  head_ = std::move(head);
  return ok_status();
}

Status GateDistiller::save() {
  std::lock_guard<std::mutex> round(round_mutex_);  // never beside a round's own save (the same files)
  return write_state();
}

Status GateDistiller::write_state() const {
  std::shared_ptr<const GateHead> head;
  std::vector<float> prototypes;
  std::vector<int64_t> counts;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    head = head_, prototypes = prototypes_, counts = counts_;
  }
  const fs::path dir(options_.state_dir);
  RETURN_IF_ERROR(head->save((dir / "gate.safetensors").string()));
  return write_safetensors(
      (dir / "prototypes.safetensors").string(),
      {{"prototypes", DType::kF32, {n_, d_}, prototypes.data()}, {"counts", DType::kI64, {n_}, counts.data()}},
      {{"adapters", nlohmann::json(names_).dump()}});
}

Status GateDistiller::observe(std::vector<float> e, const std::string& adapter) {
  if (static_cast<int64_t>(e.size()) != d_) {
    return invalid_argument("gate distillation: an embedding of " + std::to_string(e.size()) +
                            " values (the gate takes " + std::to_string(d_) + ")");
  }
  const auto named = std::find(names_.begin(), names_.end(), adapter);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!adapter.empty() && named != names_.end()) {  // the running mean: p += (e - p) / n
    const int64_t j = named - names_.begin();
    const float inv = 1.0f / static_cast<float>(++counts_[j]);
    float* p = prototypes_.data() + j * d_;
    for (int64_t c = 0; c < d_; ++c) p[c] += (e[c] - p[c]) * inv;
  }
  const bool held = stats_.samples % options_.holdout_every == options_.holdout_every - 1;
  std::deque<std::vector<float>>& into = held ? heldout_ : train_;
  into.push_back(std::move(e));
  if (static_cast<int64_t>(into.size()) > (held ? options_.holdout_max : options_.buffer_max)) into.pop_front();
  ++stats_.samples;
  if (++new_samples_ == options_.min_samples) wake_.notify_one();
  return ok_status();
}

std::shared_ptr<const GateHead> GateDistiller::head() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return head_;
}

std::optional<std::vector<float>> GateDistiller::target(const std::vector<float>& e) const {
  if (static_cast<int64_t>(e.size()) != d_) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  return target_of(e.data(), prototypes_, counts_, d_, options_.temperature);
}

GateDistillStats GateDistiller::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

StatusOr<GateDistillRound> GateDistiller::train_round() {
  std::lock_guard<std::mutex> round(round_mutex_);
  // A copy of the samples and prototypes: requests go on observing while the round runs.
  std::vector<std::vector<float>> train_samples, heldout_samples;
  std::vector<float> prototypes;
  std::vector<int64_t> counts;
  std::shared_ptr<const GateHead> before;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    train_samples.assign(train_.begin(), train_.end());
    heldout_samples.assign(heldout_.begin(), heldout_.end());
    prototypes = prototypes_, counts = counts_, before = head_;
    new_samples_ = 0;
  }
  const Batch train = usable(train_samples, prototypes, counts, d_, options_.temperature);
  const Batch heldout = usable(heldout_samples, prototypes, counts, d_, options_.temperature);
  GateDistillRound r;
  r.train_samples = train.rows, r.heldout_samples = heldout.rows;
  if (train.rows == 0 || heldout.rows == 0) return r;
  ASSIGN_OR_RETURN(r.heldout_before, before->kl_divergence(heldout.e.data(), heldout.t.data(), heldout.rows));
  GateHead head = *before;
  std::vector<int64_t> order(static_cast<size_t>(train.rows));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(round_seed_++);
  std::shuffle(order.begin(), order.end(), rng);
  Batch mini;
  GateGradient grad;
  double loss_sum = 0;
  for (int64_t at = 0; at < train.rows; at += options_.batch_size) {
    const int64_t rows = std::min(options_.batch_size, train.rows - at);
    mini.e.clear(), mini.t.clear();
    for (int64_t i = at; i < at + rows; ++i) {
      const int64_t s = order[static_cast<size_t>(i)];
      mini.e.insert(mini.e.end(), train.e.begin() + s * d_, train.e.begin() + (s + 1) * d_);
      mini.t.insert(mini.t.end(), train.t.begin() + s * n_, train.t.begin() + (s + 1) * n_);
    }
    ASSIGN_OR_RETURN(const double loss, head.kl_divergence(mini.e.data(), mini.t.data(), rows, &grad));
    loss_sum += loss * static_cast<double>(rows);
    const double norm = grad.norm();
    if (norm > options_.grad_norm_max) grad.scale(static_cast<float>(options_.grad_norm_max / norm));
    head.sgd_step(grad, static_cast<float>(options_.lr));
  }
  r.train_loss = loss_sum / static_cast<double>(train.rows);
  ASSIGN_OR_RETURN(r.heldout_after, head.kl_divergence(heldout.e.data(), heldout.t.data(), heldout.rows));
  r.trained = true;
  // Not finite (a diverged step) counts as a rise.
  r.rolled_back = !(std::isfinite(r.heldout_after) && r.heldout_after <= r.heldout_before);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.rounds;
    stats_.train_loss = r.train_loss;
    if (r.rolled_back) {
      ++stats_.rollbacks;
      stats_.heldout_loss = r.heldout_before;
    } else {
      ++stats_.updates;
      stats_.heldout_loss = r.heldout_after;
      head_ = std::make_shared<const GateHead>(std::move(head));
    }
  }
  if (!r.rolled_back) {
    Status saved = write_state();
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.save_error = saved.ok() ? std::string() : saved.to_string();
  }
  return r;
}

void GateDistiller::trainer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms),
                   [&] { return stop_ || new_samples_ >= options_.min_samples; });
    if (stop_) break;
    if (new_samples_ == 0) continue;  // nothing new since the last round: the same epoch again buys little
    lock.unlock();
    StatusOr<GateDistillRound> r = train_round();  // errors are programmer's (shapes): nothing to report them to
    (void)r.ok();
    lock.lock();
  }
}

}  // namespace mmserve::models
