// convert_llama2c (see llama2c.h).
#include "models/llama/llama2c.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/safetensors.h"
#include "frontends/text/unicode_text.h"

// stories260K.bin and tok512.bin (assets/llama2c), embedded by llama_demo_assets.S.
extern "C" const char mmserve_stories_begin[], mmserve_stories_end[];
extern "C" const char mmserve_tok512_begin[], mmserve_tok512_end[];

namespace mmserve::models {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Header {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
  bool shared;
};

// The tokens of tok512.bin-style files, in id order.
struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

StatusOr<Vocab> read_vocab(const std::string& bytes, const std::string& path, int32_t vocab_size) {
  size_t off = 0;
  auto take = [&](void* out, size_t n) -> bool {
    if (bytes.size() - off < n) return false;
    std::memcpy(out, bytes.data() + off, n);
    off += n;
    return true;
  };
  int32_t max_length = 0;
  if (!take(&max_length, 4) || max_length <= 0 || max_length > 1 << 16) {
    return invalid_argument(path + ": not a llama2.c tokenizer (bad max_token_length)");
  }
  Vocab v;
  for (int32_t id = 0; id < vocab_size; ++id) {
    float score = 0;
    int32_t length = 0;
    if (!take(&score, 4) || !take(&length, 4)) {
      return invalid_argument(path + ": ends at token " + std::to_string(id) + " of " + std::to_string(vocab_size));
    }
    if (length < 0 || length > max_length || bytes.size() - off < static_cast<size_t>(length)) {
      return invalid_argument(path + ": token " + std::to_string(id) + " has a bad length " + std::to_string(length));
    }
    v.pieces.emplace_back(bytes.data() + off, static_cast<size_t>(length));
    off += static_cast<size_t>(length);
    v.scores.push_back(score);
  }
  if (off != bytes.size()) {
    return invalid_argument(path + ": " + std::to_string(bytes.size() - off) + " bytes after the last of " +
                            std::to_string(vocab_size) + " tokens (a tokenizer for another vocabulary?)");
  }
  std::map<std::string, int32_t> seen;  // tokenizer.json's vocab maps pieces to ids: a repeat would lose an id
  for (int32_t id = 0; id < vocab_size; ++id) {
    // tokenizer.json is JSON text: a piece must be UTF-8 (SentencePiece's are; byte tokens are "<0xNN>").
    if (Status utf8 = text::validate_utf8(v.pieces[id]); !utf8.ok()) {
      return invalid_argument(path + ": token " + std::to_string(id) + " is not valid UTF-8 (" + utf8.message() + ")");
    }
    auto [it, fresh] = seen.emplace(v.pieces[id], id);
    if (!fresh) {
      return invalid_argument(path + ": token " + std::to_string(id) + " repeats token " +
                              std::to_string(it->second) + "'s piece");
    }
  }
  return v;
}

// The SentencePiece form of llama2.c's pieces: specials unwrapped, ' ' back to U+2581.
std::string sp_piece(const std::string& piece, int32_t id) {
  if (id == 1) return "<s>";
  if (id == 2) return "</s>";
  std::string out;
  for (char ch : piece) {
    if (ch == ' ') {
      out += "\xe2\x96\x81";
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

nlohmann::json tokenizer_json(const Vocab& v) {
  using nlohmann::json;
  std::map<std::string, int32_t> ids;
  json vocab = json::object();
  std::vector<std::string> pieces;
  for (int32_t id = 0; id < static_cast<int32_t>(v.pieces.size()); ++id) {
    pieces.push_back(sp_piece(v.pieces[id], id));
    ids.emplace(pieces.back(), id);
    vocab[pieces.back()] = id;
  }
  // transformers' SentencePieceExtractor: every split of a piece into two known pieces is a merge, ordered by the
  // merged piece's score (stable: ties keep id order, and within a piece by the parts' ids).
  struct Merge {
    std::string left, right;
    float score;
  };
  std::vector<Merge> merges;
  for (int32_t id = 0; id < static_cast<int32_t>(pieces.size()); ++id) {
    if (id < 3) continue;  // specials are never merged
    const std::string& piece = pieces[id];
    std::vector<Merge> local;
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      const std::string l = piece.substr(0, cut), r = piece.substr(cut);
      if (ids.count(l) && ids.count(r)) local.push_back({l, r, v.scores[id]});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::pair(ids[a.left], ids[a.right]) < std::pair(ids[b.left], ids[b.right]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(json::array({m.left, m.right}));
  auto special = [](int id, const char* content) {
    return json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},  {"normalized", false}, {"special", true}};
  };
  const std::string space = "\xe2\x96\x81";
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", space}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return internal_error(path.string() + ": cannot write");
  return ok_status();
}

}  // namespace

Status convert_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path,
                       const std::string& out_dir) {
  ASSIGN_OR_RETURN(std::string checkpoint, read_file(checkpoint_path));
  ASSIGN_OR_RETURN(std::string tokenizer, read_file(tokenizer_path));
  return convert_llama2c_bytes(checkpoint, checkpoint_path, tokenizer, tokenizer_path, out_dir);
}

Status write_demo_stories(const std::string& dir) {
  return convert_llama2c_bytes(std::string(mmserve_stories_begin, mmserve_stories_end), "stories260K.bin (built in)",
                               std::string(mmserve_tok512_begin, mmserve_tok512_end), "tok512.bin (built in)", dir);
}

Status convert_llama2c_bytes(const std::string& bytes, const std::string& label, const std::string& tokenizer,
                             const std::string& tokenizer_label, const std::string& out_dir) {
  if (bytes.size() < 28) return invalid_argument(label + ": shorter than a llama2.c header (28 bytes)");
  int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof(h));
  Header c{h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
  for (auto [name, value] : {std::pair{"dim", c.dim}, {"hidden_dim", c.hidden}, {"n_layers", c.layers},
                             {"n_heads", c.heads}, {"n_kv_heads", c.kv_heads}, {"vocab_size", c.vocab},
                             {"seq_len", c.seq}}) {
    if (value <= 0 || value > (1 << 20)) {
      return invalid_argument(label + ": header field " + name + " = " + std::to_string(value) + " is out of range");
    }
  }
  if (c.vocab < 3) {
    return invalid_argument(label + ": vocab_size " + std::to_string(c.vocab) + " cannot hold <unk>, <s> and </s>");
  }
  if (c.dim % c.heads != 0 || c.heads % c.kv_heads != 0 || (c.dim / c.heads) % 2 != 0) {
    return invalid_argument(label + ": dim " + std::to_string(c.dim) + ", n_heads " + std::to_string(c.heads) +
                            " and n_kv_heads " + std::to_string(c.kv_heads) + " do not make whole, even heads");
  }
  const int64_t dim = c.dim, hd = dim / c.heads, kv = int64_t{c.kv_heads} * hd, L = c.layers, hid = c.hidden;
  const int64_t V = c.vocab, S = c.seq;
  // run.c's tables, in file order (freq_cis_real / imag: seq_len x head_size / 2 each, unused).
  const std::vector<std::pair<std::string, int64_t>> tables = {
      {"token_embedding_table", V * dim}, {"rms_att_weight", L * dim}, {"wq", L * dim * dim},
      {"wk", L * dim * kv},              {"wv", L * dim * kv},        {"wo", L * dim * dim},
      {"rms_ffn_weight", L * dim},       {"w1", L * hid * dim},       {"w2", L * dim * hid},
      {"w3", L * hid * dim},             {"rms_final_weight", dim},   {"freq_cis", S * hd},
      {"wcls", c.shared ? 0 : V * dim}};
  int64_t floats = 0;
  for (const auto& [name, count] : tables) floats += count;
  const uint64_t want = 28 + static_cast<uint64_t>(floats) * 4;
  if (bytes.size() != want) {
    return invalid_argument(label + ": " + std::to_string(bytes.size()) + " bytes, but its header (dim " +
                            std::to_string(c.dim) + ", " + std::to_string(c.layers) + " layers, vocab " +
                            std::to_string(c.vocab) + ") needs " + std::to_string(want));
  }
  std::map<std::string, const float*> at;
  const float* p = reinterpret_cast<const float*>(bytes.data() + 28);  // std::string data: 16-byte aligned
  std::vector<float> aligned(static_cast<size_t>(floats));
  std::memcpy(aligned.data(), p, aligned.size() * 4);
  int64_t offset = 0;
  for (const auto& [name, count] : tables) {
    at[name] = aligned.data() + offset;
    offset += count;
  }
  ASSIGN_OR_RETURN(Vocab vocab, read_vocab(tokenizer, tokenizer_label, c.vocab));

  // The HF tensors. q/k rows: HF row (head, half * hd / 2 + j) <- run.c row (head, 2 j + half).
  std::vector<std::vector<float>> owned;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    owned.push_back(std::move(values));
    tensors.push_back({name, DType::kF32, std::move(shape), owned.back().data()});
  };
  auto slice = [](const float* from, int64_t count) { return std::vector<float>(from, from + count); };
  auto permute = [&](const float* w, int64_t heads) {
    std::vector<float> out(static_cast<size_t>(heads * hd * dim));
    for (int64_t head = 0; head < heads; ++head) {
      for (int64_t j = 0; j < hd / 2; ++j) {
        for (int64_t half = 0; half < 2; ++half) {
          const float* src = w + (head * hd + 2 * j + half) * dim;
          std::memcpy(out.data() + (head * hd + half * (hd / 2) + j) * dim, src, dim * 4);
        }
      }
    }
    return out;
  };
  owned.reserve(4 + 9 * static_cast<size_t>(L));
  add("model.embed_tokens.weight", {V, dim}, slice(at["token_embedding_table"], V * dim));
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    add(pre + "input_layernorm.weight", {dim}, slice(at["rms_att_weight"] + l * dim, dim));
    add(pre + "self_attn.q_proj.weight", {dim, dim}, permute(at["wq"] + l * dim * dim, c.heads));
    add(pre + "self_attn.k_proj.weight", {kv, dim}, permute(at["wk"] + l * dim * kv, c.kv_heads));
    add(pre + "self_attn.v_proj.weight", {kv, dim}, slice(at["wv"] + l * dim * kv, dim * kv));
    add(pre + "self_attn.o_proj.weight", {dim, dim}, slice(at["wo"] + l * dim * dim, dim * dim));
    add(pre + "post_attention_layernorm.weight", {dim}, slice(at["rms_ffn_weight"] + l * dim, dim));
    add(pre + "mlp.gate_proj.weight", {hid, dim}, slice(at["w1"] + l * hid * dim, hid * dim));
    add(pre + "mlp.down_proj.weight", {dim, hid}, slice(at["w2"] + l * dim * hid, dim * hid));
    add(pre + "mlp.up_proj.weight", {hid, dim}, slice(at["w3"] + l * hid * dim, hid * dim));
  }
  add("model.norm.weight", {dim}, slice(at["rms_final_weight"], dim));
  if (!c.shared) add("lm_head.weight", {V, dim}, slice(at["wcls"], V * dim));

  const nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
      {"hidden_size", dim},                    {"intermediate_size", hid},
      {"num_hidden_layers", L},                {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},     {"head_dim", hd},
      {"vocab_size", V},                       {"max_position_embeddings", S},
      {"rms_norm_eps", 1e-5},                  {"rope_theta", 10000.0},
      {"hidden_act", "silu"},                  {"tie_word_embeddings", c.shared},
      {"attention_bias", false},               {"mlp_bias", false},
      {"bos_token_id", 1},                     {"eos_token_id", 2},
      {"torch_dtype", "float32"}};
  const nlohmann::json tokenizer_config = {{"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<s>"},
                                           {"eos_token", "</s>"},  {"unk_token", "<unk>"},
                                           {"add_bos_token", true}, {"add_eos_token", false},
                                           {"legacy", true},        {"model_max_length", S}};
  const nlohmann::json generation = {{"bos_token_id", 1}, {"eos_token_id", 2}};
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return internal_error(out_dir + ": cannot create (" + ec.message() + ")");
  const fs::path dir(out_dir);
  RETURN_IF_ERROR(write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}}));
  RETURN_IF_ERROR(write_text(dir / "config.json", config.dump(2) + "\n"));
  RETURN_IF_ERROR(write_text(dir / "tokenizer.json", tokenizer_json(vocab).dump() + "\n"));
  RETURN_IF_ERROR(write_text(dir / "tokenizer_config.json", tokenizer_config.dump(2) + "\n"));
  return write_text(dir / "generation_config.json", generation.dump(2) + "\n");
}

}  // namespace mmserve::models
