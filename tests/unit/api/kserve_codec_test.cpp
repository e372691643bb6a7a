// KServe v2 codec: JSON and binary-extension requests (good and broken: truncated sections, lengths past the
// end, wrong datatypes, negative/huge shapes, base64 and UTF-8 errors), responses (JSON and binary), and the
// repository/metadata bodies. Every broken input must be a kInvalidArgument, never a crash or a throw.
#include "api/kserve_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "api/base64.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using serving::InputKind;

// The 4-byte little-endian length + bytes encoding of BYTES elements.
std::string bytes_elements(const std::vector<std::string>& elements) {
  std::string out;
  for (const std::string& e : elements) {
    const uint32_t n = static_cast<uint32_t>(e.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    out += e;
  }
  return out;
}

std::string floats_bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// A binary-extension body: the JSON header followed by the binary sections.
std::pair<std::string, size_t> binary_body(const json& header, const std::string& binary) {
  const std::string text = header.dump();
  return {text + binary, text.size()};
}

Status parse_error(const std::string& body, std::optional<size_t> json_length = std::nullopt) {
  StatusOr<KServeInferRequest> r = parse_kserve_infer(body, json_length);
  return r.ok() ? ok_status() : r.status();
}

void expect_invalid(const std::string& body, const std::string& needle,
                    std::optional<size_t> json_length = std::nullopt) {
  const Status s = parse_error(body, json_length);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << body.substr(0, 300);
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nexpected: " << needle;
}

TEST(KServeCodec, ParsesJsonTensors) {
  const std::string png = "\x89PNG fake";
  const json body = {
      {"id", "req-1"},
      {"parameters", {{"priority", 1}, {"timeout_ms", 250.5}}},
      {"inputs",
       {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {"a photo of a cat", "猫"}}},
        {{"name", "image"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {base64_encode(png)}}},
        {{"name", "pixel_values"},
         {"datatype", "FP32"},
         {"shape", {1, 3, 2, 2}},
         {"data", json::parse("[[[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12.5]]]]")}}}},  // nested
      {"outputs", {{{"name", "image_embeds"}, {"parameters", {{"binary_data", true}}}}, {{"name", "text_embeds"}}}},
  };
  StatusOr<KServeInferRequest> r = parse_kserve_infer(body.dump(), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->id.value_or(""), "req-1");
  EXPECT_EQ(r->priority.value_or(0), 1);
  EXPECT_DOUBLE_EQ(r->timeout_ms.value_or(0), 250.5);
  ASSERT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->inputs[0].text, "a photo of a cat");
  EXPECT_EQ(r->inputs[1].text, "猫");
  EXPECT_EQ(r->inputs[2].kind, InputKind::kImageBytes);
  EXPECT_EQ(r->inputs[2].image_bytes, png);
  EXPECT_EQ(r->inputs[3].kind, InputKind::kPixelValues);
  ASSERT_EQ(r->inputs[3].pixel_values.size(), 12u);
  EXPECT_FLOAT_EQ(r->inputs[3].pixel_values[11], 12.5f);
  EXPECT_EQ(r->kinds, (std::vector<InputKind>{InputKind::kText, InputKind::kText, InputKind::kImageBytes,
                                              InputKind::kPixelValues}));
  ASSERT_EQ(r->outputs.size(), 2u);
  EXPECT_TRUE(r->outputs[0].binary);
  EXPECT_FALSE(r->outputs[1].binary);
}

TEST(KServeCodec, ParsesBinaryTensorData) {
  const std::vector<float> pixels = {0.5f, -1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f};
  const std::string texts = bytes_elements({"first", "", "third"});
  const std::string images = bytes_elements({"JPEGDATA"});
  const json header = {
      {"inputs",
       {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {3}}, {"parameters", {{"binary_data_size", texts.size()}}}},
        {{"name", "image"},
         {"datatype", "BYTES"},
         {"shape", {1}},
         {"parameters", {{"binary_data_size", images.size()}}}},
        {{"name", "pixel_values"},
         {"datatype", "FP32"},
         {"shape", {1, 3, 2, 2}},
         {"parameters", {{"binary_data_size", pixels.size() * 4}}}}}},
      {"parameters", {{"binary_data_output", true}}},
  };
  const auto [body, length] = binary_body(header, texts + images + floats_bytes(pixels));
  StatusOr<KServeInferRequest> r = parse_kserve_infer(body, length);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->inputs.size(), 5u);
  EXPECT_EQ(r->inputs[0].text, "first");
  EXPECT_EQ(r->inputs[1].text, "");
  EXPECT_EQ(r->inputs[2].text, "third");
  EXPECT_EQ(r->inputs[3].image_bytes, "JPEGDATA");
  EXPECT_EQ(r->inputs[4].pixel_values, pixels);
  EXPECT_TRUE(r->binary_output);
}

TEST(KServeCodec, RefusesMalformedJson) {
  expect_invalid("", "malformed JSON");
  expect_invalid("{", "malformed JSON");
  expect_invalid("{\"inputs\": [}", "malformed JSON");
  expect_invalid("[]", "JSON object");
  expect_invalid("\"text\"", "JSON object");
  expect_invalid(
      std::string(
          "{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [\"\xff\"]}]}"),
      "malformed JSON");  // invalid UTF-8 inside a JSON string
  expect_invalid(std::string(100000, '['), "malformed JSON");
}

TEST(KServeCodec, RefusesWrongStructure) {
  auto input = [](json patch) {
    json in = {{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"x"}}};
    in.merge_patch(patch);
    return json{{"inputs", {in}}}.dump();
  };
  expect_invalid(json{{"inputs", json::array()}}.dump(), "non-empty array");
  expect_invalid(json{{"inputs", "text"}}.dump(), "non-empty array");
  expect_invalid(json{{"inputs", {1}}}.dump(), "must be an object");
  expect_invalid(json{{"inputs", {{{"name", "text"}}}}, {"bogus", 1}}.dump(), "unknown field 'bogus'");
  expect_invalid(input({{"name", nullptr}}), "string 'name'");
  expect_invalid(input({{"extra", 1}}), "unknown field 'extra'");
  expect_invalid(input({{"name", "video"}}), "unknown input 'video'");
  expect_invalid(input({{"datatype", "FP32"}}), "datatype must be BYTES");
  expect_invalid(input({{"datatype", 5}}), "string 'datatype'");
  expect_invalid(input({{"shape", nullptr}}), "needs a 'shape'");
  expect_invalid(input({{"shape", {-1}}}), "non-negative");
  expect_invalid(input({{"shape", "1"}}), "shape must be an array");
  expect_invalid(input({{"shape", {1.5}}}), "integers");
  expect_invalid(input({{"shape", {1, 1}}}), "shape must be [N]");
  expect_invalid(input({{"shape", {2}}}), "shape has 2 elements but data has 1");
  expect_invalid(input({{"shape", {0}}}), "shape has 0 elements but data has 1");
  expect_invalid(input({{"shape", {uint64_t{1} << 63}}}), "too large");
  expect_invalid(input({{"shape", {int64_t{1} << 30, int64_t{1} << 30}}}), "");
  expect_invalid(input({{"data", "x"}}), "data must be an array");
  expect_invalid(input({{"data", {1}}}), "must be a string");
  expect_invalid(input({{"data", nullptr}}), "needs 'data'");
  expect_invalid(input({{"parameters", {{"binary_data_size", 4}}}}), "binary tensor data extension");
  expect_invalid(input({{"parameters", 3}}), "'parameters' must be an object");
  expect_invalid(json{{"inputs",
                       {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}},
                        {{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"b"}}}}}}
                     .dump(),
                 "given twice");
  expect_invalid(
      json{{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {0}}, {"data", json::array()}}}}}.dump(),
      "no elements");
  expect_invalid(
      json{{"id", 5}, {"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}}}}}.dump(),
      "'id' must be a string");
}

TEST(KServeCodec, RefusesBadParametersAndOutputs) {
  const json in = {{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}};
  expect_invalid(json{{"inputs", {in}}, {"parameters", {{"priority", 0}}}}.dump(), "parameters.priority");
  expect_invalid(json{{"inputs", {in}}, {"parameters", {{"priority", "1"}}}}.dump(), "parameters.priority");
  expect_invalid(json{{"inputs", {in}}, {"parameters", {{"timeout_ms", -5}}}}.dump(), "parameters.timeout_ms");
  expect_invalid(json{{"inputs", {in}}, {"parameters", {{"binary_data_output", 1}}}}.dump(), "binary_data_output");
  expect_invalid(json{{"inputs", {in}}, {"outputs", {{{"name", "nope"}}}}}.dump(), "unknown output 'nope'");
  expect_invalid(json{{"inputs", {in}}, {"outputs", {{{"name", "text_embeds"}}, {{"name", "text_embeds"}}}}}.dump(),
                 "requested twice");
  expect_invalid(
      json{{"inputs", {in}}, {"outputs", {{{"name", "text_embeds"}, {"parameters", {{"binary_data", "yes"}}}}}}}.dump(),
      "binary_data must be a boolean");
  expect_invalid(json{{"inputs", {in}}, {"outputs", "text_embeds"}}.dump(), "'outputs' must be an array");
}

TEST(KServeCodec, RefusesBadImagesAndPixels) {
  auto image = [](json data, json shape = {1}) {
    return json{{"inputs", {{{"name", "image"}, {"datatype", "BYTES"}, {"shape", shape}, {"data", data}}}}}.dump();
  };
  expect_invalid(image({"not base64!"}), "invalid base64");
  expect_invalid(image({""}), "empty image");
  expect_invalid(image({"https://example.com/cat.png"}), "URL fetches are disabled");
  expect_invalid(image({"data:text/plain;base64,AAAA"}), "media type");
  expect_invalid(image({42}), "must be a string");
  EXPECT_TRUE(parse_kserve_infer(image({"data:image/png;base64,iVBORw0KGgo="}), std::nullopt).ok());

  auto pixels = [](json shape, json data, const char* datatype = "FP32") {
    return json{{"inputs", {{{"name", "pixel_values"}, {"datatype", datatype}, {"shape", shape}, {"data", data}}}}}
        .dump();
  };
  expect_invalid(pixels({1, 3, 1, 1}, {1, 2, 3}, "BYTES"), "datatype must be FP32");
  expect_invalid(pixels({1, 1, 1, 1}, {1}), "[M, 3, S, S]");
  expect_invalid(pixels({3, 1, 1}, {1, 2, 3}), "[M, 3, S, S]");
  expect_invalid(pixels({1, 3, 1, 1}, {1, 2}), "shape has 3 elements but data has 2");
  expect_invalid(pixels({1, 3, 1, 1}, {1, "2", 3}), "must be a number");
  expect_invalid(pixels({1, 3, 1, 1}, {1, 2, 1e39}), "not a finite FP32");
  expect_invalid(pixels({1, 3, 1, 1}, {1, true, 3}), "must be a number");
  expect_invalid(pixels({1, 3, 1, 70000}, {1}), "[M, 3, S, S]");
  expect_invalid(pixels({1, 3, 1, 1}, json::parse("[[[[[[[[[[[[1]]]]]]]]]]]]")), "nested deeper");
}

TEST(KServeCodec, RefusesBrokenBinarySections) {
  auto header = [](const char* name, const char* datatype, json shape, int64_t size) {
    return json{
        {"inputs",
         {{{"name", name}, {"datatype", datatype}, {"shape", shape}, {"parameters", {{"binary_data_size", size}}}}}}};
  };
  const std::string two = bytes_elements({"ab", "cd"});
  // binary_data_size past the end of the body
  auto [b1, l1] = binary_body(header("text", "BYTES", {2}, 100), two);
  expect_invalid(b1, "runs past the end of the body", l1);
  // bytes left over
  auto [b2, l2] = binary_body(header("text", "BYTES", {2}, static_cast<int64_t>(two.size())), two + "xx");
  expect_invalid(b2, "not claimed", l2);
  // truncated length prefix
  auto [b3, l3] = binary_body(header("text", "BYTES", {2}, 8), two.substr(0, 8));
  expect_invalid(b3, "truncated 4-byte length", l3);
  // an element length past its section
  std::string lying = bytes_elements({"ab"});
  lying[0] = 50;
  auto [b4, l4] = binary_body(header("text", "BYTES", {1}, static_cast<int64_t>(lying.size())), lying);
  expect_invalid(b4, "runs past the end of its binary data", l4);
  // a huge element length (0xFFFFFFFF)
  std::string huge = bytes_elements({"ab"});
  huge[0] = huge[1] = huge[2] = huge[3] = static_cast<char>(0xFF);
  auto [b5, l5] = binary_body(header("text", "BYTES", {1}, static_cast<int64_t>(huge.size())), huge);
  expect_invalid(b5, "runs past the end", l5);
  // element count differs from the shape
  auto [b6, l6] = binary_body(header("text", "BYTES", {3}, static_cast<int64_t>(two.size())), two);
  expect_invalid(b6, "binary data holds 2", l6);
  // invalid UTF-8 text
  const std::string bad_text = bytes_elements({"\xc3\x28"});
  auto [b7, l7] = binary_body(header("text", "BYTES", {1}, static_cast<int64_t>(bad_text.size())), bad_text);
  expect_invalid(b7, "not valid UTF-8", l7);
  // FP32 size not matching the shape
  auto [b8, l8] = binary_body(header("pixel_values", "FP32", {1, 3, 1, 1}, 8), floats_bytes({1, 2}));
  expect_invalid(b8, "needs 12 bytes", l8);
  // NaN pixels
  auto [b9, l9] = binary_body(header("pixel_values", "FP32", {1, 3, 1, 1}, 12), floats_bytes({1, NAN, 2}));
  expect_invalid(b9, "not a finite", l9);
  // negative binary_data_size
  auto [b10, l10] = binary_body(header("text", "BYTES", {1}, -4), two);
  expect_invalid(b10, "non-negative", l10);
  // both data and binary_data_size
  json both = header("text", "BYTES", {2}, static_cast<int64_t>(two.size()));
  both["inputs"][0]["data"] = {"a", "b"};
  auto [b11, l11] = binary_body(both, two);
  expect_invalid(b11, "both 'data' and binary_data_size", l11);
  // an empty image element
  const std::string empty_image = bytes_elements({""});
  auto [b12, l12] = binary_body(header("image", "BYTES", {1}, 4), empty_image);
  expect_invalid(b12, "empty image", l12);
  // the JSON header cut in the middle
  auto [b13, l13] = binary_body(header("text", "BYTES", {2}, static_cast<int64_t>(two.size())), two);
  expect_invalid(b13, "malformed JSON", l13 - 5);
  // header length past the body
  expect_invalid(b13, "exceeds the body size", b13.size() + 1);
}

TEST(KServeCodec, InferenceHeaderLength) {
  EXPECT_EQ(parse_inference_header_length("12", 20).value(), 12u);
  EXPECT_EQ(parse_inference_header_length(" 0 ", 0).value(), 0u);
  EXPECT_FALSE(parse_inference_header_length("21", 20).ok());
  EXPECT_FALSE(parse_inference_header_length("-1", 20).ok());
  EXPECT_FALSE(parse_inference_header_length("1e3", 2000).ok());
  EXPECT_FALSE(parse_inference_header_length("", 20).ok());
  EXPECT_FALSE(parse_inference_header_length("99999999999999999999999", 20).ok());
}

serving::ResponseData wrap(engine::ClipOutput clip) {
  serving::ResponseData out;
  out.output = std::make_shared<engine::ClipOutput>(std::move(clip));
  return out;
}

engine::ClipOutput response_for(const std::vector<InputKind>& kinds, int64_t dim) {
  engine::ClipOutput r;
  r.dim = dim;
  for (size_t i = 0; i < kinds.size(); ++i) {
    std::vector<float> e(static_cast<size_t>(dim));
    for (int64_t d = 0; d < dim; ++d)
      e[static_cast<size_t>(d)] = static_cast<float>(i) + 0.125f * static_cast<float>(d);
    r.embeddings.push_back(e);
    (kinds[i] == InputKind::kText ? r.texts : r.images)++;
  }
  for (int64_t m = 0; m < r.images; ++m) {
    for (int64_t n = 0; n < r.texts; ++n) r.logits_per_image.push_back(static_cast<float>(m * 10 + n));
  }
  return r;
}

TEST(KServeCodec, EncodesJsonResponses) {
  KServeInferRequest request;
  request.id = "abc";
  request.kinds = {InputKind::kImageBytes, InputKind::kText, InputKind::kText, InputKind::kPixelValues};
  const engine::ClipOutput clip = response_for(request.kinds, 3);
  const serving::ResponseData response = wrap(clip);
  StatusOr<EncodedBody> encoded = encode_kserve_infer("clip", request, response);
  ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
  EXPECT_FALSE(encoded->json_length.has_value());
  const json body = json::parse(encoded->body);
  EXPECT_EQ(body["model_name"], "clip");
  EXPECT_EQ(body["model_version"], "1");
  EXPECT_EQ(body["id"], "abc");
  ASSERT_EQ(body["outputs"].size(), 3u);
  EXPECT_EQ(body["outputs"][0]["name"], "text_embeds");
  EXPECT_EQ(body["outputs"][0]["shape"], json({2, 3}));
  EXPECT_EQ(body["outputs"][0]["datatype"], "FP32");
  // texts are inputs 1 and 2, in order
  EXPECT_EQ(body["outputs"][0]["data"], json({1.0, 1.125, 1.25, 2.0, 2.125, 2.25}));
  EXPECT_EQ(body["outputs"][1]["name"], "image_embeds");
  EXPECT_EQ(body["outputs"][1]["data"], json({0.0, 0.125, 0.25, 3.0, 3.125, 3.25}));
  EXPECT_EQ(body["outputs"][2]["name"], "logits_per_image");
  EXPECT_EQ(body["outputs"][2]["shape"], json({2, 2}));
}

TEST(KServeCodec, EncodesBinaryOutputs) {
  KServeInferRequest request;
  request.kinds = {InputKind::kText, InputKind::kImageBytes};
  request.outputs = {{"logits_per_image", false}, {"image_embeds", true}};
  const engine::ClipOutput clip = response_for(request.kinds, 4);
  const serving::ResponseData response = wrap(clip);
  StatusOr<EncodedBody> encoded = encode_kserve_infer("m", request, response);
  ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
  ASSERT_TRUE(encoded->json_length.has_value());
  EXPECT_EQ(encoded->content_type, "application/octet-stream");
  const json header = json::parse(encoded->body.substr(0, *encoded->json_length));
  ASSERT_EQ(header["outputs"].size(), 2u);
  EXPECT_EQ(header["outputs"][0]["name"], "logits_per_image");
  EXPECT_TRUE(header["outputs"][0].contains("data"));
  EXPECT_EQ(header["outputs"][1]["parameters"]["binary_data_size"], 16);
  EXPECT_FALSE(header["outputs"][1].contains("data"));
  ASSERT_EQ(encoded->body.size(), *encoded->json_length + 16);
  std::vector<float> values(4);
  std::memcpy(values.data(), encoded->body.data() + *encoded->json_length, 16);
  EXPECT_EQ(values, clip.embeddings[1]);
}

TEST(KServeCodec, RefusesOutputsTheInputsCannotProduce) {
  KServeInferRequest request;
  request.kinds = {InputKind::kText};
  request.outputs = {{"image_embeds", false}};
  StatusOr<EncodedBody> e = encode_kserve_infer("m", request, wrap(response_for(request.kinds, 2)));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  request.outputs = {{"logits_per_image", false}};
  e = encode_kserve_infer("m", request, wrap(response_for(request.kinds, 2)));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("both texts and images"), std::string::npos);
}

TEST(KServeCodec, InconsistentServerResponsesAreInternalErrors) {
  KServeInferRequest request;
  request.kinds = {InputKind::kText, InputKind::kImageBytes};
  engine::ClipOutput short_response = response_for({InputKind::kText}, 2);
  EXPECT_EQ(encode_kserve_infer("m", request, wrap(short_response)).status().code(), StatusCode::kInternal);
  engine::ClipOutput bad_logits = response_for(request.kinds, 2);
  bad_logits.logits_per_image.clear();
  EXPECT_EQ(encode_kserve_infer("m", request, wrap(bad_logits)).status().code(), StatusCode::kInternal);
  engine::ClipOutput bad_dim = response_for(request.kinds, 2);
  bad_dim.embeddings[1].push_back(1.f);
  EXPECT_EQ(encode_kserve_infer("m", request, wrap(bad_dim)).status().code(), StatusCode::kInternal);
  EXPECT_EQ(encode_kserve_infer("m", request, serving::ResponseData{}).status().code(), StatusCode::kInternal)
      << "no output at all";
}

TEST(KServeCodec, MetadataAndRepositoryBodies) {
  const json server = json::parse(encode_server_metadata());
  EXPECT_EQ(server["name"], "mmserve");
  EXPECT_EQ(server["extensions"], json({"model_repository", "binary_tensor_data", "generate"}));
  serving::ModelMetadata m;
  m.name = "clip";
  m.platform = "mmserve_clip";
  m.inputs = {{"text", "BYTES", {-1}}};
  m.outputs = {{"text_embeds", "FP32", {-1, 512}}};
  const json meta = json::parse(encode_model_metadata(m));
  EXPECT_EQ(meta["versions"], json({"1"}));
  EXPECT_EQ(meta["inputs"][0]["shape"], json({-1}));
  EXPECT_EQ(meta["outputs"][0]["datatype"], "FP32");

  std::vector<serving::ModelStatus> models(2);
  models[0].name = "a";
  models[0].state = serving::ModelState::kReady;
  models[1].name = "b";
  models[1].state = serving::ModelState::kFailed;
  models[1].reason = "bad weights";
  const json all = json::parse(encode_repository_index(models, false));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]["state"], "READY");
  EXPECT_EQ(all[1]["reason"], "bad weights");
  EXPECT_EQ(json::parse(encode_repository_index(models, true)).size(), 1u);

  EXPECT_FALSE(parse_repository_index("").value());
  EXPECT_TRUE(parse_repository_index("{\"ready\": true}").value());
  EXPECT_FALSE(parse_repository_index("{\"ready\": 1}").ok());
  EXPECT_FALSE(parse_repository_index("{\"other\": 1}").ok());
  EXPECT_FALSE(parse_repository_index("[").ok());
  EXPECT_TRUE(parse_repository_action("").ok());
  EXPECT_TRUE(parse_repository_action("{\"parameters\": {}}").ok());
  EXPECT_FALSE(parse_repository_action("{\"parameters\": 1}").ok());
  EXPECT_FALSE(parse_repository_action("nope").ok());
}

TEST(KServeCodec, ParsesAudioInputsAndWhisperParameters) {
  const std::string wav = std::string("RIFF\0\0\0\0WAVEfmt ", 16);
  json body = {
      {"parameters",
       {{"language", "fr"},
        {"task", "translate"},
        {"timestamps", false},
        {"prompt", "Bonjour."},
        {"beam_size", 5},
        {"temperature", 0.8}}},
      {"inputs", {{{"name", "audio"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {base64_encode(wav)}}}}}};
  StatusOr<KServeInferRequest> r = parse_kserve_infer(body.dump(), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->inputs[0].kind, InputKind::kAudioBytes);
  EXPECT_EQ(r->inputs[0].audio_bytes, wav);
  EXPECT_EQ(r->transcribe.language, "fr");
  EXPECT_EQ(r->transcribe.task, engine::WhisperTask::kTranslate);
  EXPECT_FALSE(r->transcribe.timestamps);
  EXPECT_EQ(r->transcribe.initial_prompt, "Bonjour.");
  EXPECT_EQ(r->transcribe.beam_size, 5);
  ASSERT_EQ(r->transcribe.temperatures.size(), 2u);  // 0.8, 1.0
  EXPECT_NEAR(r->transcribe.temperatures[0], 0.8f, 1e-6);

  // The binary extension: raw bytes, no base64.
  const auto [binary, length] = binary_body({{"inputs",
                                              {{{"name", "audio"},
                                                {"datatype", "BYTES"},
                                                {"shape", {1}},
                                                {"parameters", {{"binary_data_size", 4 + wav.size()}}}}}}},
                                            bytes_elements({wav}));
  r = parse_kserve_infer(binary, length);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->inputs[0].audio_bytes, wav);
  EXPECT_EQ(r->transcribe.task, engine::WhisperTask::kTranscribe);  // the default

  auto audio = [](json patch, json params = json::object()) {
    json in = {{"name", "audio"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"UklGRg=="}}};
    in.merge_patch(patch);
    return json{{"parameters", params}, {"inputs", {in}}}.dump();
  };
  expect_invalid(audio({{"datatype", "UINT8"}}), "datatype must be BYTES");
  expect_invalid(audio({{"shape", {1, 1}}}), "shape must be [1]");
  expect_invalid(audio({{"data", {"not base64!"}}}), "input 'audio': element 0");
  expect_invalid(audio({{"data", {""}}}), "empty audio file");
  expect_invalid(audio({{"data", {7}}}), "base64 string");
  expect_invalid(audio({}, {{"task", "summarise"}}), "parameters.task");
  expect_invalid(audio({}, {{"language", 1}}), "parameters.language");
  expect_invalid(audio({}, {{"timestamps", "yes"}}), "parameters.timestamps");
  expect_invalid(audio({}, {{"beam_size", 0}}), "parameters.beam_size");
  expect_invalid(audio({}, {{"temperature", 2}}), "parameters.temperature");
  const auto [cut, cut_length] = binary_body({{"inputs",
                                               {{{"name", "audio"},
                                                 {"datatype", "BYTES"},
                                                 {"shape", {1}},
                                                 {"parameters", {{"binary_data_size", 4 + wav.size()}}}}}}},
                                             bytes_elements({wav}).substr(0, 10));
  expect_invalid(cut, "runs past the end", cut_length);
}

TEST(KServeCodec, EncodesTranscripts) {
  engine::Transcript t;
  t.text = " Hello \"world\"";
  t.language = "en";
  t.duration = 2.5;
  engine::TranscriptSegment s;
  s.id = 0;
  s.start = 0.0;
  s.end = 2.5;
  s.text = t.text;
  s.tokens = {50364, 2425, 50489};
  t.segments.push_back(s);
  KServeInferRequest request;
  request.id = "a1";
  StatusOr<EncodedBody> out = encode_kserve_transcript("whisper", request, t);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_FALSE(out->json_length.has_value());
  json body = json::parse(out->body);
  EXPECT_EQ(body["model_name"], "whisper");
  EXPECT_EQ(body["id"], "a1");
  ASSERT_EQ(body["outputs"].size(), 3u);
  EXPECT_EQ(body["outputs"][0]["name"], "text");
  EXPECT_EQ(body["outputs"][0]["datatype"], "BYTES");
  EXPECT_EQ(body["outputs"][0]["shape"], json({1}));
  EXPECT_EQ(body["outputs"][0]["data"][0], t.text);
  const json segments = json::parse(body["outputs"][1]["data"][0].get<std::string>());
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0]["tokens"], json({50364, 2425, 50489}));
  EXPECT_EQ(segments[0]["end"], 2.5);
  EXPECT_EQ(body["outputs"][2]["data"][0], "en");

  // One output, binary.
  request.outputs = {{"text", true}};
  out = encode_kserve_transcript("whisper", request, t);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_TRUE(out->json_length.has_value());
  EXPECT_EQ(out->content_type, "application/octet-stream");
  body = json::parse(out->body.substr(0, *out->json_length));
  ASSERT_EQ(body["outputs"].size(), 1u);
  EXPECT_EQ(body["outputs"][0]["parameters"]["binary_data_size"], 4 + t.text.size());
  EXPECT_EQ(out->body.substr(*out->json_length), bytes_elements({t.text}));

  request.outputs = {{"text_embeds", false}};
  out = encode_kserve_transcript("whisper", request, t);
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  // Through encode_kserve_infer: a response with a transcript is written as one.
  serving::ResponseData response;
  auto transcript = std::make_shared<engine::TranscriptOutput>();
  transcript->transcript = t;
  response.output = transcript;
  request.outputs.clear();
  out = encode_kserve_infer("whisper", request, response);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(json::parse(out->body)["outputs"][0]["name"], "text");
}

}  // namespace
}  // namespace mmserve::api

namespace mmserve::api {
namespace {

// Named FP32/INT32 tensors of other families (SAM's point prompts): carried as kTensor inputs with their shape,
// JSON or binary; wrong datatypes, non-integers in INT32, INT32 overflow and a binary size that does not match the
// shape are 400s naming the input. SAM's parameters multimask_output / image_id are read and type-checked.
TEST(KServeCodec, NamedTensorsAndSamParameters) {
  nlohmann::json body = {
      {"parameters", {{"multimask_output", false}, {"image_id", "abc"}}},
      {"inputs",
       {{{"name", "point_coords"}, {"datatype", "FP32"}, {"shape", {2, 2}}, {"data", {1.5, 2, 3, 4}}},
        {{"name", "point_labels"}, {"datatype", "INT32"}, {"shape", {2}}, {"data", {1, 0}}}}}};
  auto r = parse_kserve_infer(body.dump(), std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->inputs.size(), 2u);
  EXPECT_EQ(r->inputs[0].kind, InputKind::kTensor);
  EXPECT_EQ(r->inputs[0].name, "point_coords");
  EXPECT_EQ(r->inputs[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r->inputs[0].values, (std::vector<float>{1.5f, 2, 3, 4}));
  EXPECT_EQ(r->inputs[1].values, (std::vector<float>{1, 0}));
  EXPECT_FALSE(r->multimask_output);
  EXPECT_EQ(r->image_id, "abc");
  auto params = kserve_params(*r);
  EXPECT_FALSE(params->multimask_output);
  EXPECT_EQ(params->image_id, "abc");

  auto refused = [](nlohmann::json b, const std::string& needle) {
    auto out = parse_kserve_infer(b.dump(), std::nullopt);
    ASSERT_FALSE(out.ok()) << b.dump();
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(needle), std::string::npos) << out.status().message();
  };
  auto one = [](nlohmann::json input) { return nlohmann::json{{"inputs", {input}}}; };
  refused(one({{"name", "boxes"}, {"datatype", "UINT8"}, {"shape", {1}}, {"data", {1}}}), "unknown input");
  refused(one({{"name", "point_labels"}, {"datatype", "INT32"}, {"shape", {1}}, {"data", {1.5}}}), "integer");
  refused(one({{"name", "point_labels"}, {"datatype", "INT32"}, {"shape", {1}}, {"data", {4294967296LL}}}),
          "outside INT32");
  refused(one({{"name", "boxes"}, {"datatype", "FP32"}, {"shape", {1, 4}}, {"data", {1, 2, 3}}}), "boxes");
  nlohmann::json bad_params = body;
  bad_params["parameters"] = {{"multimask_output", "yes"}};
  refused(bad_params, "multimask_output");
  bad_params["parameters"] = {{"image_id", 7}};
  refused(bad_params, "image_id");
  // Binary: 8 bytes claimed for a [1, 4] FP32 tensor.
  const std::string header =
      R"({"inputs": [{"name": "boxes", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 8}}]})";
  auto binary = parse_kserve_infer(header + std::string(8, '\0'), header.size());
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.status().message().find("binary_data_size"), std::string::npos) << binary.status().message();
}

}  // namespace
}  // namespace mmserve::api
