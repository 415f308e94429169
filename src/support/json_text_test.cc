#include "support/json_text.h"

#include <string>

#include "gtest/gtest.h"
#include "support/status_macros.h"

namespace spillway {
namespace {

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<nlohmann::json> parsed = ParseStrictJson(text);
  if (parsed.ok()) return "ok";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(StatusMessage(parsed.status()));
}

TEST(ParseStrictJsonTest, ParsesOrdinaryDocuments) {
  absl::StatusOr<nlohmann::json> parsed =
      ParseStrictJson(R"({"name": "x", "bandwidth": 1.5e9, "links": [1, {"a": null}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)["bandwidth"].get<double>(), 1.5e9);
  EXPECT_EQ(ErrorOf("[]"), "ok");
}

TEST(ParseStrictJsonTest, RefusesADuplicateKeyNamingIt) {
  EXPECT_EQ(ErrorOf(R"({"a": 1, "a": 2})"), "field 'a': the key is given twice");
  EXPECT_EQ(ErrorOf(R"({"x": {"b": 1, "c": 2, "b": 3}})"), "field 'x.b': the key is given twice");
  EXPECT_EQ(ErrorOf(R"([{"a": 1}, {"a": 2}])"), "ok");  // the same key in two objects
}

TEST(ParseStrictJsonTest, RefusesANumberBeyondDoubleNamingTheField) {
  EXPECT_EQ(ErrorOf(R"({"fp32_flops": 1e400})"),
            "field 'fp32_flops': the number 1e400 does not fit a double");
  EXPECT_EQ(ErrorOf(R"({"list": [1, 2, -1e999]})"),
            "field 'list.2': the number -1e999 does not fit a double");
}

TEST(ParseStrictJsonTest, RefusesDeepNestingBeforeBuildingIt) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(ErrorOf(deep).find("nested deeper than 64 levels"), std::string::npos);
  const std::string allowed = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(ErrorOf(allowed), "ok");
}

TEST(ParseStrictJsonTest, SyntaxErrorsSayWhereWithoutTheLibrarysTags) {
  const std::string error = ErrorOf(R"({"a": })");
  EXPECT_EQ(error.rfind("not valid JSON: ", 0), 0u) << error;
  EXPECT_EQ(error.find("json.exception"), std::string::npos) << error;
}

}  // namespace
}  // namespace spillway
