// HF tokenizers' BPE model: vocabulary/merge validation and the rank-ordered merge loop with a word cache.
//
// merge_word mirrors `BPE::merge_word` + `Word::merge_all` (tokenizers/src/models/bpe/{model,word}.rs): a
// linked list of symbols, a min-heap of (rank, position) candidate merges, stale heap entries skipped by
// re-checking the pair's merge result. Tests: tests/unit/frontends/text/bpe_test.cpp.
#include "frontends/text/bpe.h"

#include <algorithm>
#include <mutex>
#include <queue>

namespace mmserve::text {
namespace {

constexpr int32_t kIdMax = (1 << 24) - 1;   // ids beyond this are rejected (a corrupt vocabulary)
constexpr size_t kCacheCapacity = 10000;    // words, as tokenizers' DEFAULT_CACHE_CAPACITY
constexpr size_t kCacheWordBytesMax = 256;  // longer words are not cached

size_t utf8_length_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::create(BpeConfig config) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  int32_t id_max = -1;
  for (const auto& [token, id] : config.vocab) {
    if (id < 0 || id > kIdMax) {
      return invalid_argument("vocabulary: token \"" + token + "\" has id " + std::to_string(id) +
                              " (ids must be in [0, " + std::to_string(kIdMax) + "])");
    }
    id_max = std::max(id_max, id);
  }
  model->id_to_token_.resize(static_cast<size_t>(id_max + 1));
  model->has_token_.assign(static_cast<size_t>(id_max + 1), false);
  for (const auto& [token, id] : config.vocab) {
    model->id_to_token_[id] = token;
    model->has_token_[id] = true;
  }
  model->vocab_ = std::move(config.vocab);

  const std::string& prefix = config.continuing_subword_prefix;
  if (!config.merge_ranks.empty() && config.merge_ranks.size() != config.merges.size()) {
    return invalid_argument(std::to_string(config.merges.size()) + " merges but " +
                            std::to_string(config.merge_ranks.size()) + " merge ranks");
  }
  model->merges_.reserve(config.merges.size());
  std::string merged;
  for (size_t i = 0; i < config.merges.size(); ++i) {
    // Plain references, not a structured binding: clang 14 (the fuzz build) cannot capture those in a lambda.
    const std::string& a = config.merges[i].first;
    const std::string& b = config.merges[i].second;
    const auto line = [&] { return "merge " + std::to_string(i + 1) + " (\"" + a + " " + b + "\")"; };
    const int32_t rank = config.merge_ranks.empty() ? static_cast<int32_t>(i) : config.merge_ranks[i];
    if (rank < 0) return invalid_argument(line() + ": negative rank " + std::to_string(rank));
    const auto a_id = model->token_to_id(a);
    if (!a_id) return invalid_argument(line() + ": \"" + a + "\" is not in the vocabulary");
    const auto b_id = model->token_to_id(b);
    if (!b_id) return invalid_argument(line() + ": \"" + b + "\" is not in the vocabulary");
    const std::string_view b_rest =
        std::string_view(b).substr(b.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0);
    merged.assign(a).append(b_rest);
    const auto new_id = model->token_to_id(merged);
    if (!new_id) return invalid_argument(line() + ": the result \"" + merged + "\" is not in the vocabulary");
    // A repeated pair keeps its last rank, as HF's HashMap collect does.
    model->merges_[pair_key(*a_id, *b_id)] = {rank, *new_id};
  }

  if (config.unk_token) {
    const auto unk = model->token_to_id(*config.unk_token);
    if (!unk) return invalid_argument("unknown token \"" + *config.unk_token + "\" is not in the vocabulary");
    model->unk_id_ = *unk;
  }
  model->continuing_subword_prefix_ = std::move(config.continuing_subword_prefix);
  model->end_of_word_suffix_ = std::move(config.end_of_word_suffix);
  model->fuse_unk_ = config.fuse_unk;
  model->byte_fallback_ = config.byte_fallback;
  model->ignore_merges_ = config.ignore_merges;
  if (config.byte_fallback) {
    model->byte_ids_.assign(256, -1);
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const std::string token = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";  // Rust's {:#04X}
      if (const auto id = model->token_to_id(token)) model->byte_ids_[b] = *id;
    }
  }
  return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheWordBytesMax;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(ids));
  }
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    size_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&symbols](int32_t id, size_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };

  // An unknown-token symbol waiting to be added (HF keeps it pending so fuse_unk can extend it).
  bool has_pending_unk = false;
  size_t pending_unk_len = 0;
  std::string piece;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_length_at(word, i);
    const bool is_first = i == 0;
    const bool is_last = i + len >= word.size();
    piece.clear();
    if (!is_first) piece += continuing_subword_prefix_;
    piece.append(word.substr(i, len));
    if (is_last) piece += end_of_word_suffix_;
    i += len;
    if (const auto id = token_to_id(piece)) {
      if (has_pending_unk) add(unk_id_, pending_unk_len);
      has_pending_unk = false;
      add(*id, len);
    } else if (byte_fallback_ && std::all_of(piece.begin(), piece.end(), [this](char c) {
                 return byte_ids_[static_cast<unsigned char>(c)] >= 0;
               })) {
      // As tokenizers: the piece's bytes (prefix and suffix included) as <0xNN> tokens, each covering one byte
      // of the word; a pending unknown token is not flushed first (it lands after them).
      for (const char c : piece) add(byte_ids_[static_cast<unsigned char>(c)], 1);
    } else if (unk_id_ >= 0) {
      if (has_pending_unk && fuse_unk_) {
        pending_unk_len += len;
      } else {
        if (has_pending_unk) add(unk_id_, pending_unk_len);
        has_pending_unk = true;
        pending_unk_len = len;
      }
    }
  }
  if (has_pending_unk) add(unk_id_, pending_unk_len);

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // max-heap on "comes later": lowest rank, then leftmost, on top
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  const auto find_merge = [this](int32_t a, int32_t b) -> const MergeTarget* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeTarget* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    const MergeTarget* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry

    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next >= 0 && static_cast<size_t>(right.next) < symbols.size()) symbols[right.next].prev = top.pos;

    if (left.prev >= 0) {
      if (const MergeTarget* m = find_merge(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0 && static_cast<size_t>(left.next) < symbols.size()) {
      if (const MergeTarget* m = find_merge(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }

  std::vector<int32_t> ids;
  ids.reserve(symbols.size());
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
  return ids;
}

}  // namespace mmserve::text
