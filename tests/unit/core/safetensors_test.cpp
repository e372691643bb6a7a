// Tests of the safetensors reader/writer and the model-directory WeightStore (src/core/safetensors.h).
//
// Every file here is built byte by byte (8-byte little-endian header length, JSON text, data bytes written
// as hex), so expectations come from the format, not from our own writer. Each validation error has a
// case that checks the Status code and that the message names the file and the tensor. The writer is
// checked by reading its raw bytes back with an independent JSON parse; directories exercise the sharded
// index (happy path, missing shard, absent tensor, duplicate tensor, path traversal).
#include "core/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mmserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr const char* kLabel = "bad.safetensors";

std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string make_file(const std::string& header, const std::string& data = "") {
  return u64le(header.size()) + header + data;
}

// 1.0f, 2.0f, 3.0f, 4.0f as little-endian IEEE bytes.
const std::string kOneTwoThreeFour("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40", 16);

// The returned file points into `bytes`, so callers keep `bytes` alive while they use it.
StatusOr<std::unique_ptr<SafetensorsFile>> parse(const std::string& bytes) {
  return SafetensorsFile::from_buffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kLabel);
}

// Parses `bytes`, expects failure with `code` and a message containing the label and every needle.
void expect_error(const std::string& bytes, StatusCode code, const std::vector<std::string>& needles) {
  auto result = parse(bytes);
  ASSERT_FALSE(result.ok()) << "parsed unexpectedly";
  EXPECT_EQ(result.status().code(), code) << result.status().to_string();
  EXPECT_THAT(result.status().message(), HasSubstr(kLabel));
  for (const auto& needle : needles) EXPECT_THAT(result.status().message(), HasSubstr(needle));
}

// A one-tensor header for tensor 'w' with the given entry body.
std::string one(const std::string& entry) {
  return R"({"w": )" + entry + "}";
}

TEST(SafetensorsParseTest, ValidFile) {
  const std::string header = R"({"__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "BF16", "shape": [2], "data_offsets": [16, 20]}})";
  const std::string bytes = make_file(header, kOneTwoThreeFour + std::string("\x80\x3f\x49\x40", 4));
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->path(), kLabel);
  EXPECT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");

  const TensorInfo* a = (*file)->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a->numel(), 4);
  EXPECT_EQ(a->nbytes, 16u);
  EXPECT_EQ(a->data, reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + header.size());
  Tensor view = a->view();
  EXPECT_EQ(view.dims(), 2);
  EXPECT_EQ(view.dtype(), DType::kF32);
  float values[4];
  std::memcpy(values, view.data(), 16);  // the header is not 4-aligned here, so no direct float reads
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[3], 4.0f);

  const TensorInfo* b = (*file)->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->data[0], 0x80);
  EXPECT_EQ(b->data[1], 0x3f);
  EXPECT_EQ((*file)->find("c"), nullptr);
}

TEST(SafetensorsParseTest, HeaderPaddedWithSpaces) {
  const std::string bytes = make_file(one(R"({"dtype": "U8", "shape": [2], "data_offsets": [0, 2]})") + "      ", "xy");
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->find("w")->data[1], 'y');
}

TEST(SafetensorsParseTest, EmptyHeaderObject) {
  const std::string bytes = make_file("{}");
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(SafetensorsParseTest, ZeroElementAndScalarTensors) {
  const std::string header = R"({
    "empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
    "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
    "empty_end": {"dtype": "I64", "shape": [5, 0], "data_offsets": [4, 4]},
    "scalar": {"dtype": "U8", "shape": [], "data_offsets": [4, 5]}})";
  const std::string bytes = make_file(header, std::string("\x00\x00\x80\x3f\x07", 5));
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->find("empty")->nbytes, 0u);
  EXPECT_EQ((*file)->find("empty")->numel(), 0);
  EXPECT_EQ((*file)->find("empty_end")->nbytes, 0u);
  EXPECT_EQ((*file)->find("scalar")->numel(), 1);
  EXPECT_EQ((*file)->find("scalar")->data[0], 7);
  EXPECT_EQ((*file)->find("scalar")->view().dims(), 0);
}

TEST(SafetensorsParseTest, UnreferencedBytesAreAllowed) {
  // Gaps and trailing bytes are tolerated (only overlap is unsafe).
  const std::string bytes = make_file(one(R"({"dtype": "U8", "shape": [1], "data_offsets": [2, 3]})"), "abcdef");
  auto file = parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->find("w")->data[0], 'c');
}

TEST(SafetensorsParseTest, AllKnownDtypes) {
  const char* dtypes[] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I32", "I64"};
  const size_t sizes[] = {4, 2, 2, 1, 1, 1, 1, 4, 8};
  for (int i = 0; i < 9; ++i) {
    const std::string entry = std::string(R"({"dtype": ")") + dtypes[i] + R"(", "shape": [3], "data_offsets": [0, )" +
                              std::to_string(3 * sizes[i]) + "]}";
    const std::string bytes = make_file(one(entry), std::string(24, '\0'));
    auto file = parse(bytes);
    ASSERT_TRUE(file.ok()) << dtypes[i] << ": " << file.status().to_string();
    EXPECT_EQ((*file)->find("w")->nbytes, 3 * sizes[i]);
  }
}

TEST(SafetensorsErrorTest, ShorterThanEightBytes) {
  expect_error("", StatusCode::kOutOfRange, {"shorter"});
  expect_error(std::string("\x02\x00\x00", 3), StatusCode::kOutOfRange, {"3 bytes", "shorter"});
}

TEST(SafetensorsErrorTest, HeaderLengthBeyondFile) {
  expect_error(u64le(100) + "{}", StatusCode::kOutOfRange, {"100", "truncated"});
  expect_error(u64le(~0ull) + "{}", StatusCode::kResourceExhausted, {"limit"});
}

TEST(SafetensorsErrorTest, HeaderLengthOverLimit) {
  expect_error(u64le(100'000'001) + "{}", StatusCode::kResourceExhausted, {"100000001", "limit"});
}

TEST(SafetensorsErrorTest, JsonSyntaxError) {
  expect_error(make_file(R"({"w": )"), StatusCode::kInvalidArgument, {"syntax error", "line 1"});
  expect_error(make_file("{\n\"w\": [1,,]}"), StatusCode::kInvalidArgument, {"line 2, column 9"});
  // nlohmann alone would stop at the NUL and accept "{}".
  expect_error(make_file(std::string("{}\0xyz", 6)), StatusCode::kInvalidArgument, {"NUL byte at header offset 2"});
}

TEST(SafetensorsErrorTest, InvalidUtf8InHeader) {
  expect_error(make_file("{\"w\xff\": {}}"), StatusCode::kInvalidArgument, {"UTF-8"});
}

TEST(SafetensorsErrorTest, NumberTooLargeForADouble) {
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1e400], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"1e400"});
}

TEST(SafetensorsErrorTest, HeaderNotAnObject) {
  expect_error(make_file("[1, 2]"), StatusCode::kInvalidArgument, {"not a JSON object"});
  expect_error(make_file("\"w\""), StatusCode::kInvalidArgument, {"not a JSON object"});
}

TEST(SafetensorsErrorTest, EntryNotAnObject) {
  expect_error(make_file(one("5")), StatusCode::kInvalidArgument, {"'w'", "not an object"});
  expect_error(make_file(one("[]")), StatusCode::kInvalidArgument, {"'w'", "not an object"});
}

TEST(SafetensorsErrorTest, MissingKeys) {
  expect_error(make_file(one(R"({"shape": [1], "data_offsets": [0, 4]})")), StatusCode::kInvalidArgument,
               {"'w'", "missing \"dtype\""});
  expect_error(make_file(one(R"({"dtype": "F32", "data_offsets": [0, 4]})")), StatusCode::kInvalidArgument,
               {"'w'", "missing \"shape\""});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1]})")), StatusCode::kInvalidArgument,
               {"'w'", "missing \"data_offsets\""});
}

TEST(SafetensorsErrorTest, WrongTypes) {
  const std::string data(4, '\0');
  expect_error(make_file(one(R"({"dtype": 5, "shape": [1], "data_offsets": [0, 4]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "\"dtype\" is not a string"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": "1", "data_offsets": [0, 4]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "\"shape\" is not an array"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": 4})"), data),
               StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 4]})"), data),
               StatusCode::kInvalidArgument, {"'w'", "data_offsets"});
}

TEST(SafetensorsErrorTest, UnknownDtype) {
  expect_error(make_file(one(R"({"dtype": "F64", "shape": [1], "data_offsets": [0, 8]})"), std::string(8, 0)),
               StatusCode::kUnimplemented, {"'w'", "F64"});
  expect_error(make_file(one(R"({"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]})"), "x"),
               StatusCode::kUnimplemented, {"'w'", "BOOL"});
}

TEST(SafetensorsErrorTest, BadDimensions) {
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "shape[0]", "-1"});
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [1, 2.5], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "shape[1]", "2.5"});
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [2.0], "data_offsets": [0, 2]})"), "xy"),
               StatusCode::kInvalidArgument, {"'w'", "shape[0]"});
  expect_error(make_file(one(R"({"dtype": "U8", "shape": ["2"], "data_offsets": [0, 2]})"), "xy"),
               StatusCode::kInvalidArgument, {"'w'", "shape[0]"});
  // 2^63 does not fit the int64 dimensions a Tensor holds.
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [9223372036854775808], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "shape[0]"});
}

TEST(SafetensorsErrorTest, TooManyDimensions) {
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [1,1,1,1,1,1,1], "data_offsets": [0, 1]})"), "x"),
               StatusCode::kUnimplemented, {"'w'", "7 dimensions"});
}

TEST(SafetensorsErrorTest, ByteCountOverflow) {
  // 2^32 * 2^32 = 2^64 elements: the element count itself overflows.
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "overflow"});
  // 2^62 elements fit, but 2^62 * 4 bytes = 2^64 does not.
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "overflow"});
  // A count that wraps to exactly 0 must not pass as an empty tensor: 2^61 * 8 = 2^64 = 0 mod 2^64.
  expect_error(make_file(one(R"({"dtype": "I64", "shape": [2305843009213693952], "data_offsets": [0, 0]})")),
               StatusCode::kInvalidArgument, {"'w'", "overflow"});
}

TEST(SafetensorsErrorTest, ByteCountMismatch) {
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})"), std::string(12, 0)),
               StatusCode::kInvalidArgument, {"'w'", "needs 12 bytes", "hold 8"});
}

TEST(SafetensorsErrorTest, BeginAfterEnd) {
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [4], "data_offsets": [8, 4]})"), std::string(8, 0)),
               StatusCode::kInvalidArgument, {"'w'", "begin > end"});
}

TEST(SafetensorsErrorTest, TruncatedDataSection) {
  expect_error(make_file(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})"), std::string(8, 0)),
               StatusCode::kOutOfRange, {"'w'", "truncated", "16", "8 bytes"});
  // An offset far past the end (would wrap a pointer) is the same error, not a crash.
  expect_error(make_file(one(R"({"dtype": "U8", "shape": [1], "data_offsets": [9223372036854775806,
               9223372036854775807]})")),
               StatusCode::kOutOfRange, {"'w'", "truncated"});
}

TEST(SafetensorsErrorTest, OverlappingTensors) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  expect_error(make_file(header, std::string(12, 0)), StatusCode::kInvalidArgument, {"'a'", "'b'", "overlap"});
  // One range inside another, listed with the inner one first.
  const std::string nested = R"({"inner": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
                                 "outer": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}})";
  expect_error(make_file(nested, std::string(16, 0)), StatusCode::kInvalidArgument,
               {"'inner'", "'outer'", "bytes [4, 6)"});
  // The same range twice under two names.
  const std::string twin = R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                               "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})";
  expect_error(make_file(twin, std::string(4, 0)), StatusCode::kInvalidArgument, {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsErrorTest, DuplicateTensorName) {
  const std::string header = R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                 "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})";
  expect_error(make_file(header, "ab"), StatusCode::kInvalidArgument, {"'w'", "twice"});
}

TEST(SafetensorsErrorTest, MetadataNotStrings) {
  expect_error(make_file(R"({"__metadata__": {"format": "pt", "step": 1000}})"), StatusCode::kInvalidArgument,
               {"__metadata__", "step", "not a string"});
  expect_error(make_file(R"({"__metadata__": ["pt"]})"), StatusCode::kInvalidArgument,
               {"__metadata__", "not an object"});
}

class SafetensorsDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mmserve_core_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }
  std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // A shard holding U8 tensors of one byte each, named `names`, with bytes 'a', 'b', ...
  static std::string shard(const std::vector<std::string>& names) {
    std::string header = "{";
    std::string data;
    for (size_t i = 0; i < names.size(); ++i) {
      header += (i ? ", \"" : "\"") + names[i] + R"(": {"dtype": "U8", "shape": [1], "data_offsets": [)" +
                std::to_string(i) + ", " + std::to_string(i + 1) + "]}";
      data += static_cast<char>('a' + i);
    }
    return make_file(header + "}", data);
  }
  void write_index(const std::string& weight_map_json) {
    write("model.safetensors.index.json", R"({"metadata": {"total_size": 3}, "weight_map": )" + weight_map_json + "}");
  }

  fs::path dir_;
};

TEST_F(SafetensorsDirTest, OpenMapsFile) {
  const std::string path = write("m.safetensors", make_file(one(R"({"dtype": "F32", "shape": [4],
                                                                 "data_offsets": [0, 16]})") +
                                                                "   ",
                                                            kOneTwoThreeFour));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->path(), path);
  float values[4];
  std::memcpy(values, (*file)->find("w")->view().data(), 16);
  EXPECT_EQ(values[1], 2.0f);
  EXPECT_EQ(values[2], 3.0f);
}

TEST_F(SafetensorsDirTest, OpenMissingFile) {
  const std::string path = (dir_ / "nope.safetensors").string();
  auto file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  EXPECT_THAT(file.status().message(), HasSubstr("No such file or directory"));
}

TEST_F(SafetensorsDirTest, OpenEmptyFile) {
  const std::string path = write("empty.safetensors", "");
  auto file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  EXPECT_THAT(file.status().message(), HasSubstr("shorter"));
}

TEST_F(SafetensorsDirTest, OpenDirectory) {
  auto file = SafetensorsFile::open(dir_.string());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsDirTest, OpenTruncatedFileNamesPath) {
  const std::string path = write("t.safetensors", make_file(one(R"({"dtype": "F32", "shape": [4],
                                                               "data_offsets": [0, 16]})"),
                                                            "\x01\x02"));
  auto file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  EXPECT_THAT(file.status().message(), HasSubstr("'w'"));
  EXPECT_THAT(file.status().message(), HasSubstr("truncated"));
}

TEST_F(SafetensorsDirTest, WriteRoundTrip) {
  const float a[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const uint16_t b[3] = {0x3f80, 0x4049, 0xc000};
  const uint8_t d = 0x2a;
  const std::string path = (dir_ / "rt.safetensors").string();
  // Deliberately not in alphabetical order: offsets must follow this order even though JSON keys sort.
  Status s = write_safetensors(path,
                               {{"z_first", DType::kF32, {2, 2}, a},
                                {"b", DType::kBF16, {3}, b},
                                {"c_empty", DType::kI64, {0, 4}, nullptr},
                                {"a_scalar", DType::kU8, {}, &d}},
                               {{"format", "pt"}});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const std::string raw = read(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(raw.size(), 8 + n + 16 + 6 + 0 + 1);
  const auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["z_first"]["data_offsets"], nlohmann::json({0, 16}));
  EXPECT_EQ(header["z_first"]["dtype"], "F32");
  EXPECT_EQ(header["z_first"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({16, 22}));
  EXPECT_EQ(header["b"]["dtype"], "BF16");
  EXPECT_EQ(header["c_empty"]["data_offsets"], nlohmann::json({22, 22}));
  EXPECT_EQ(header["a_scalar"]["data_offsets"], nlohmann::json({22, 23}));
  EXPECT_EQ(header["a_scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(raw.substr(8 + n, 16), kOneTwoThreeFour);
  EXPECT_EQ(raw.substr(8 + n + 16, 6), std::string("\x80\x3f\x49\x40\x00\xc0", 6));
  EXPECT_EQ(static_cast<uint8_t>(raw.back()), 0x2a);

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 4u);
  EXPECT_EQ((*file)->find("b")->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(std::memcmp((*file)->find("b")->data, b, 6), 0);
  EXPECT_EQ((*file)->find("c_empty")->nbytes, 0u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
}

TEST_F(SafetensorsDirTest, WriteRefusesBadInput) {
  const uint8_t x[2] = {1, 2};
  const std::string path = (dir_ / "bad.safetensors").string();
  Status dup = write_safetensors(path, {{"w", DType::kU8, {1}, x}, {"w", DType::kU8, {1}, x + 1}});
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dup.message(), HasSubstr("'w'"));
  Status reserved = write_safetensors(path, {{"__metadata__", DType::kU8, {1}, x}});
  EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument);
  Status negative = write_safetensors(path, {{"n", DType::kU8, {-1}, x}});
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("'n'"));
  EXPECT_FALSE(fs::exists(path));
  Status no_dir = write_safetensors((dir_ / "missing" / "x.safetensors").string(), {});
  EXPECT_FALSE(no_dir.ok());
}

TEST_F(SafetensorsDirTest, ModelDirSingleFile) {
  write("model.safetensors", shard({"x", "y"}));
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ((*store)->files().size(), 1u);
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"x", "y"}));
  ASSERT_NE((*store)->find("y"), nullptr);
  EXPECT_EQ((*store)->find("y")->data[0], 'b');
  EXPECT_EQ((*store)->find("z"), nullptr);
  EXPECT_EQ((*store)->total_bytes(), 2u);
}

TEST_F(SafetensorsDirTest, ModelDirMissingEverything) {
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr(dir_.string()));
  EXPECT_THAT(store.status().message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(store.status().message(), HasSubstr("nor model.safetensors"));
}

TEST_F(SafetensorsDirTest, ModelDirSharded) {
  write("model-00001-of-00002.safetensors", shard({"a", "b"}));
  write("model-00002-of-00002.safetensors", shard({"c"}));
  write_index(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors"})");
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ((*store)->files().size(), 2u);
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*store)->find("b")->data[0], 'b');
  EXPECT_EQ((*store)->find("c")->data[0], 'a');  // first tensor of the second shard
  EXPECT_EQ((*store)->total_bytes(), 3u);
}

TEST_F(SafetensorsDirTest, ModelDirMissingShard) {
  write("model-00001-of-00002.safetensors", shard({"a"}));
  write_index(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})");
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsDirTest, ModelDirTensorAbsentFromShard) {
  write("s1.safetensors", shard({"a"}));
  write("s2.safetensors", shard({"b"}));
  write_index(R"({"a": "s1.safetensors", "b": "s2.safetensors", "ghost": "s2.safetensors"})");
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(store.status().message(), HasSubstr("'ghost'"));
  EXPECT_THAT(store.status().message(), HasSubstr("s2.safetensors"));
}

TEST_F(SafetensorsDirTest, ModelDirTensorInTwoShards) {
  write("s1.safetensors", shard({"a", "dup"}));
  write("s2.safetensors", shard({"dup"}));
  write_index(R"({"a": "s1.safetensors", "dup": "s2.safetensors"})");
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(), HasSubstr("'dup'"));
  EXPECT_THAT(store.status().message(), HasSubstr("s1.safetensors"));
  EXPECT_THAT(store.status().message(), HasSubstr("s2.safetensors"));
}

TEST_F(SafetensorsDirTest, ModelDirRefusesPathTraversal) {
  write("s1.safetensors", shard({"a"}));
  for (const char* name : {"../s1.safetensors", "sub/s1.safetensors", "/etc/passwd", "..", ""}) {
    write_index(std::string(R"({"a": ")") + name + "\"}");
    auto store = WeightStore::open_model_dir(dir_.string());
    ASSERT_FALSE(store.ok()) << name;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(store.status().message(), HasSubstr(std::string("'") + name + "'"));
    EXPECT_THAT(store.status().message(), HasSubstr("model.safetensors.index.json"));
  }
}

TEST_F(SafetensorsDirTest, ModelDirBadIndex) {
  write("model.safetensors.index.json", R"({"metadata": {}})");
  auto no_map = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(no_map.ok());
  EXPECT_EQ(no_map.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_map.status().message(), HasSubstr("weight_map"));

  write("model.safetensors.index.json", "[1]");
  auto not_object = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(not_object.ok());
  EXPECT_EQ(not_object.status().code(), StatusCode::kInvalidArgument);

  write("model.safetensors.index.json", R"({"weight_map": {"a": 1}})");
  auto not_string = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(not_string.ok());
  EXPECT_THAT(not_string.status().message(), HasSubstr("weight_map.a"));

  write("model.safetensors.index.json", R"({"weight_map": )");
  auto syntax = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(syntax.ok());
  EXPECT_THAT(syntax.status().message(), HasSubstr("syntax error"));
}

TEST_F(SafetensorsDirTest, ModelDirBrokenShardNamesIt) {
  write("s1.safetensors", "short");
  write_index(R"({"a": "s1.safetensors"})");
  auto store = WeightStore::open_model_dir(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("s1.safetensors"));
}

}  // namespace
}  // namespace mmserve
