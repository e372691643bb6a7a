// The families table (engine/families.h): every detected family is served, and the family option check refuses
// keys that belong to another family with a message naming the key and the family.
#include "engine/families.h"

#include <gtest/gtest.h>
#include "test_paths.h"

namespace mmserve::engine {
namespace {

TEST(Families, EveryServedFamilyHasItsFactories) {
  for (models::Family family : {models::Family::kClip, models::Family::kWhisper}) {
    auto ops = find_family(family);
    ASSERT_TRUE(ops.ok()) << models::family_name(family) << ": " << ops.status().to_string();
    EXPECT_EQ((*ops)->family, family);
    EXPECT_NE((*ops)->create_executor, nullptr);
    EXPECT_NE((*ops)->create_preparer, nullptr);
    EXPECT_TRUE(check_servable(family).ok());
  }
}

TEST(Families, ForeignKeysAreRefusedByName) {
  const nlohmann::json config = {{"cross_kv", "int8"}};
  EXPECT_TRUE(check_known_keys(config, {"cross_kv", "decoder_rows"}, "Whisper").ok());
  const Status s = check_known_keys(config, {"vision_micro_batch"}, "CLIP");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'cross_kv' does not apply to CLIP models"), std::string::npos) << s.message();
  EXPECT_TRUE(check_known_keys(nlohmann::json::object(), {}, "CLIP").ok());
  EXPECT_FALSE(check_known_keys(nlohmann::json::array(), {}, "CLIP").ok());
}

TEST(Families, ClipRefusesWhisperKeysAtCreation) {
  auto ops = find_family(models::Family::kClip);
  ASSERT_TRUE(ops.ok());
  auto created = (*ops)->create_executor(MMSERVE_FIXTURES_DIR + "/clip-tiny-quickgelu-f32", ExecutorOptions{},
                                         nlohmann::json{{"decoder_rows", 8}});
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("'decoder_rows' does not apply to CLIP models"), std::string::npos)
      << created.status().message();
}

}  // namespace
}  // namespace mmserve::engine
