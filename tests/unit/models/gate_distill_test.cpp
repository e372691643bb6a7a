// The gate head's online distillation (issue 16 item 5, models/lora/gate_distill.h): the hand-written backward
// against finite differences and one SGD step against torch's (tools/reference/make_gate_fixtures.py:
// tests/fixtures/lora_gate/distill_step.safetensors); a synthetic stream whose explicit requests cluster around
// distinct prototypes teaches the router their choice; a diverging round is rolled back; the state survives a
// restart; the lr bound; the trainer thread starts and stops.
#include "models/lora/gate_distill.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "../../conformance/golden.h"
#include "core/safetensors.h"

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

// A head with PyTorch's default Linear initialisation (uniform in +-1/sqrt(fan_in)).
GateHead random_head(int64_t d, int64_t h, std::vector<std::string> names, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = static_cast<int64_t>(names.size());
  auto uniform = [&](int64_t count, int64_t fan_in) {
    std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(fan_in)),
                                            1.0f / std::sqrt(static_cast<float>(fan_in)));
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = u(rng);
    return v;
  };
  auto w1 = uniform(h * d, d), b1 = uniform(h, d), w2 = uniform(n * h, h), b2 = uniform(n, h);
  auto head = GateHead::from_weights(d, h, std::move(w1), std::move(b1), std::move(w2), std::move(b2), names);
  EXPECT_TRUE(head.ok()) << head.status().to_string();
  return std::move(*head);
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mmserve_distill_" + name + "_" + std::to_string(::getpid()));
  return dir;
}

// Requests around three directions: explicit ones name the adapter of their cluster, the rest ("auto") do not.
struct Stream {
  static constexpr int64_t kD = 16;
  std::vector<std::vector<float>> centers;
  std::mt19937_64 rng{42};
  Stream() {
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int j = 0; j < 3; ++j) {
      std::vector<float> c(kD);
      for (float& x : c) x = g(rng);
      centers.push_back(c);
    }
  }
  // A request of cluster j: its center plus noise of a third of its norm.
  std::vector<float> sample(int j) {
    std::normal_distribution<float> g(0.0f, 0.35f);
    std::vector<float> e = centers[static_cast<size_t>(j)];
    for (float& x : e) x += g(rng);
    return e;
  }
};

const std::vector<std::string> kNames = {"a", "b", "c"};

// Feeds `count` requests, one explicit in three.
void feed(GateDistiller& d, Stream& s, int count) {
  for (int i = 0; i < count; ++i) {
    const int j = i % 3;
    ASSERT_TRUE(d.observe(s.sample(j), (i / 3) % 3 == 0 ? kNames[static_cast<size_t>(j)] : "").ok());
  }
}

// Fresh requests with their targets under the distiller's prototypes.
struct Probe {
  std::vector<float> e, t;
  std::vector<std::vector<float>> rows;
  int64_t n = 0;
};
Probe probe(const GateDistiller& d, Stream& s, int count) {
  Probe p;
  for (int i = 0; i < count; ++i) {
    std::vector<float> e = s.sample(i % 3);
    std::optional<std::vector<float>> t = d.target(e);
    EXPECT_TRUE(t.has_value());
    if (!t) continue;
    p.e.insert(p.e.end(), e.begin(), e.end());
    p.t.insert(p.t.end(), t->begin(), t->end());
    p.rows.push_back(e);
    ++p.n;
  }
  return p;
}

double kl(const GateHead& head, const Probe& p) {
  auto loss = head.kl_divergence(p.e.data(), p.t.data(), p.n);
  EXPECT_TRUE(loss.ok());
  return loss.ok() ? *loss : 1e9;
}

GateDistillOptions manual(const fs::path& dir) {
  GateDistillOptions o;
  o.state_dir = dir.string();
  o.background = false;
  o.lr = kGateDistillLrMax;
  o.batch_size = 16;
  o.grad_norm_max = 5.0;
  return o;
}

// Each test's own state directory, removed after it (its distillers, locals, have saved into it by then).
class GateDistillerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};
using GateHeadTraining = GateDistillerTest;

TEST(GateHeadGradient, MatchesFiniteDifferences) {
  const int64_t d = 5, h = 7, n = 3, batch = 4;
  GateHead head = random_head(d, h, {"x", "y", "z"}, 3);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> e(static_cast<size_t>(batch * d)), t(static_cast<size_t>(batch * n));
  for (float& x : e) x = g(rng);
  for (int64_t b = 0; b < batch; ++b) {  // random distributions, one with a zero entry (0 log 0 = 0)
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (t[b * n + j] = (b == 1 && j == 2) ? 0.0f : std::exp(g(rng)));
    for (int64_t j = 0; j < n; ++j) t[b * n + j] /= sum;
  }
  GateGradient grad;
  ASSERT_TRUE(head.kl_divergence(e.data(), t.data(), batch, &grad).ok());
  // Central differences on every parameter, the loss in f64 over f32 forwards: eps 1e-2 keeps rounding ~1e-5.
  const std::vector<float>* params[] = {&head.w1(), &head.b1(), &head.w2(), &head.b2()};
  const std::vector<float>* grads[] = {&grad.w1, &grad.b1, &grad.w2, &grad.b2};
  const float eps = 1e-2f;
  double worst = 0, largest = 0;
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < params[k]->size(); ++i) {
      auto loss_at = [&](float delta) {
        std::vector<float> w1 = head.w1(), b1 = head.b1(), w2 = head.w2(), b2 = head.b2();
        std::vector<float>* v[] = {&w1, &b1, &w2, &b2};
        (*v[k])[i] += delta;
        auto moved = GateHead::from_weights(d, h, w1, b1, w2, b2, head.adapters());
        return *moved->kl_divergence(e.data(), t.data(), batch);
      };
      const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      worst = std::max(worst, std::abs(numeric - (*grads[k])[i]));
      largest = std::max(largest, std::abs(numeric));
    }
  }
  EXPECT_GT(largest, 1e-2);  // the check checks something
  EXPECT_LT(worst, 2e-3 * largest) << "largest " << largest;
  EXPECT_FALSE(head.kl_divergence(e.data(), t.data(), 0).ok());
}

// One SGD step over the golden prompts' embeddings, against torch's kl_div(batchmean) + SGD on the same gate.
TEST_F(GateHeadTraining, OneStepIsTorchs) {
  const std::string dir = testing::fixture("lora_gate");
  if (!fs::exists(dir + "/distill_step.safetensors")) {
    GTEST_SKIP() << "tests/fixtures/lora_gate/distill_step.safetensors is absent: run "
                    "tools/reference/make_gate_fixtures.py --distill-only on a host with torch";
  }
  auto gate = GateHead::load(dir + "/gate.safetensors");
  ASSERT_TRUE(gate.ok()) << gate.status().to_string();
  testing::Golden golden(dir + "/golden.safetensors"), step(dir + "/distill_step.safetensors");
  const std::vector<float> emb = golden.f32("embeddings"), targets = step.f32("targets");
  const int64_t d = gate->input_dim(), n = static_cast<int64_t>(gate->adapters().size());
  const int64_t p = static_cast<int64_t>(emb.size()) / d;
  ASSERT_EQ(static_cast<int64_t>(targets.size()), p * n);
  // Our target under the same prototypes (the first N prompts' embeddings: a running mean of one sample each).
  GateDistillOptions o = manual(dir_);
  auto distiller = GateDistiller::create(*gate, o);
  ASSERT_TRUE(distiller.ok()) << distiller.status().to_string();
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_TRUE((*distiller)
                    ->observe(std::vector<float>(emb.begin() + j * d, emb.begin() + (j + 1) * d),
                              gate->adapters()[static_cast<size_t>(j)])
                    .ok());
  }
  for (int64_t i = 0; i < p; ++i) {
    auto t = (*distiller)->target(std::vector<float>(emb.begin() + i * d, emb.begin() + (i + 1) * d));
    ASSERT_TRUE(t.has_value());
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR((*t)[j], targets[i * n + j], 1e-5) << i << ", " << j;
  }
  GateGradient grad;
  auto loss = gate->kl_divergence(emb.data(), targets.data(), p, &grad);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, step.f32("loss")[0], 1e-5 * std::max(1.0, std::abs(*loss)));
  GateHead moved = *gate;
  moved.sgd_step(grad, step.f32("lr")[0]);
  // The step itself (updated - original) against torch's: the weights dwarf it, so compare the deltas. A delta is
  // known to one f32 ulp of its weight (the gate's first layer is scaled up: ~1e-4 of the largest step, measured
  // against a float64 twin of the script), hence 1e-3 of the largest.
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>> tensors[] = {
      {"gate.0.weight", {&gate->w1(), &moved.w1()}},
      {"gate.0.bias", {&gate->b1(), &moved.b1()}},
      {"gate.2.weight", {&gate->w2(), &moved.w2()}},
      {"gate.2.bias", {&gate->b2(), &moved.b2()}}};
  for (const auto& [name, pair] : tensors) {
    SCOPED_TRACE(name);
    const std::vector<float> torch = step.f32(std::string("step.") + name);
    ASSERT_EQ(torch.size(), pair.first->size());
    double largest = 0, worst = 0;
    for (size_t i = 0; i < torch.size(); ++i) {
      const double theirs = torch[i] - (*pair.first)[i], ours = (*pair.second)[i] - (*pair.first)[i];
      largest = std::max(largest, std::abs(theirs));
      worst = std::max(worst, std::abs(theirs - ours));
    }
    EXPECT_GT(largest, 0.0);
    EXPECT_LT(worst, 1e-3 * largest + 1e-6) << "largest step " << largest;
  }
}

TEST_F(GateDistillerTest, LearnsThePrototypesChoice) {
  Stream s;
  auto d = GateDistiller::create(random_head(Stream::kD, 32, kNames, 1), manual(dir_));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  feed(**d, s, 900);
  const Probe fresh = probe(**d, s, 300);
  const std::shared_ptr<const GateHead> start = (*d)->head();
  const double kl_start = kl(*start, fresh);
  for (int round = 0; round < 40; ++round) {
    auto r = (*d)->train_round();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->trained);
    EXPECT_EQ(r->heldout_samples, 900 / 5);
  }
  const GateDistillStats stats = (*d)->stats();
  EXPECT_GE(stats.updates, 30);
  EXPECT_EQ(stats.updates + stats.rollbacks, 40);
  EXPECT_EQ(stats.samples, 900);
  EXPECT_GE(stats.heldout_loss, 0);
  const std::shared_ptr<const GateHead> trained = (*d)->head();
  EXPECT_NE(trained, start);
  const double kl_end = kl(*trained, fresh);
  EXPECT_LT(kl_end, kl_start / 20) << "KL " << kl_start << " -> " << kl_end;
  // The router's top-1 on fresh requests is the target's.
  int agree = 0;
  for (int64_t i = 0; i < fresh.n; ++i) {
    auto choice = trained->route(fresh.rows[static_cast<size_t>(i)], 1);
    ASSERT_TRUE(choice.ok());
    const float* t = fresh.t.data() + i * 3;
    if (choice->index[0] == std::max_element(t, t + 3) - t) ++agree;
  }
  EXPECT_GE(agree, fresh.n * 95 / 100) << agree << " of " << fresh.n;
}

TEST_F(GateDistillerTest, SkipsSamplesWithoutTwoPrototypes) {
  Stream s;
  auto d = GateDistiller::create(random_head(Stream::kD, 8, kNames, 2), manual(dir_));
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*d)->observe(s.sample(0), i % 2 ? "a" : "not-in-the-gate").ok());
  EXPECT_FALSE((*d)->target(s.sample(0)).has_value());  // one prototype: no choice to learn
  auto r = (*d)->train_round();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->trained);
  EXPECT_EQ((*d)->stats().rounds, 0);
  ASSERT_TRUE((*d)->observe(s.sample(1), "b").ok());
  EXPECT_TRUE((*d)->target(s.sample(0)).has_value());
  EXPECT_FALSE((*d)->target(std::vector<float>(Stream::kD, 0.0f)).has_value());  // no cosine for a zero e
  EXPECT_EQ((*d)->observe(std::vector<float>(3), "a").code(), StatusCode::kInvalidArgument);
}

TEST_F(GateDistillerTest, ARoundThatRaisesTheHeldApartLossIsRolledBack) {
  Stream s;
  GateDistillOptions o = manual(dir_);
  o.lr = 1e4;  // far past the bound: the step throws the head away
  o.lr_unbounded = true;
  o.grad_norm_max = 1e4;
  auto d = GateDistiller::create(random_head(Stream::kD, 32, kNames, 1), o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  feed(**d, s, 300);
  const std::shared_ptr<const GateHead> before = (*d)->head();
  auto r = (*d)->train_round();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->trained);
  EXPECT_TRUE(r->rolled_back) << r->heldout_before << " -> " << r->heldout_after;
  EXPECT_FALSE(r->heldout_after <= r->heldout_before);
  EXPECT_EQ((*d)->head(), before);  // the head in use is the one of before
  const GateDistillStats stats = (*d)->stats();
  EXPECT_EQ(stats.rollbacks, 1);
  EXPECT_EQ(stats.updates, 0);
  EXPECT_DOUBLE_EQ(stats.heldout_loss, r->heldout_before);  // not worse than before the round
}

TEST_F(GateDistillerTest, TheLearningRateIsBounded) {
  GateDistillOptions o = manual(dir_);
  for (double lr : {0.5, 0.0, -1e-3}) {
    o.lr = lr;
    auto d = GateDistiller::create(random_head(4, 4, kNames, 1), o);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("gate_distill_lr"), std::string::npos) << d.status().message();
  }
  o.lr = 1e-3;
  o.state_dir.clear();
  EXPECT_EQ(GateDistiller::create(random_head(4, 4, kNames, 1), o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GateDistillerTest, StateSurvivesARestart) {
  Stream s;
  const GateHead configured = random_head(Stream::kD, 32, kNames, 1);
  std::vector<std::vector<float>> probes;
  for (int i = 0; i < 12; ++i) probes.push_back(s.sample(i % 3));
  std::vector<std::vector<float>> probs, targets;
  {
    auto d = GateDistiller::create(configured, manual(dir_));
    ASSERT_TRUE(d.ok());
    feed(**d, s, 300);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*d)->train_round().ok());
    ASSERT_GE((*d)->stats().updates, 1);
    // A second distiller on the same directory (another replica) is refused while this one lives.
    auto twin = GateDistiller::create(configured, manual(dir_));
    ASSERT_FALSE(twin.ok());
    EXPECT_EQ(twin.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(twin.status().message().find("in use"), std::string::npos) << twin.status().message();
    // Observed after the last kept round: saved when the distiller ends.
    ASSERT_TRUE((*d)->observe(s.sample(2), "c").ok());
    for (const auto& e : probes) {
      probs.push_back((*d)->head()->route(e, 1)->probs);
      targets.push_back(*(*d)->target(e));
    }
  }
  EXPECT_TRUE(fs::exists(dir_ / "gate.safetensors") && fs::exists(dir_ / "gate.json") &&
              fs::exists(dir_ / "prototypes.safetensors"));
  auto restored = GateDistiller::create(configured, manual(dir_));  // the configured head again: the saved one wins
  ASSERT_TRUE(restored.ok()) << restored.status().to_string();
  for (size_t i = 0; i < probes.size(); ++i) {
    EXPECT_EQ((*restored)->head()->route(probes[i], 1)->probs, probs[i]);
    EXPECT_EQ(*(*restored)->target(probes[i]), targets[i]);
  }
  auto plain = configured.route(probes[0], 1);
  EXPECT_NE(plain->probs, probs[0]);  // the restore did restore something
  restored->reset();
  // Another gate's directory is refused, naming the way out.
  auto other = GateDistiller::create(random_head(Stream::kD, 32, {"a", "b", "x"}, 1), manual(dir_));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("another gate"), std::string::npos) << other.status().message();
}

TEST_F(GateDistillerTest, TheTrainerThreadTrainsAndStops) {
  Stream s;
  GateDistillOptions o = manual(dir_);
  o.background = true;
  o.interval_ms = 60000;  // only min_samples wakes it within the test
  o.min_samples = 50;
  auto d = GateDistiller::create(random_head(Stream::kD, 16, kNames, 1), o);
  ASSERT_TRUE(d.ok());
  const auto start = std::chrono::steady_clock::now();
  feed(**d, s, 300);  // requests go on while it trains
  while ((*d)->stats().rounds == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE((*d)->stats().rounds, 1);
  const auto stopping = std::chrono::steady_clock::now();
  d->reset();  // joins a thread asleep for a minute: the stop must wake it
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(5));
}

}  // namespace
}  // namespace mmserve::models
