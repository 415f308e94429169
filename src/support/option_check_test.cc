#include "support/option_check.h"

#include <cmath>
#include <limits>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/checked_math.h"
#include "support/status_macros.h"

namespace spillway {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(StatusMessage(status)); }

TEST(CheckedMathTest, ReportsOverflowInsteadOfWrapping) {
  EXPECT_EQ(CheckedAdd(2, 3), 5);
  EXPECT_EQ(CheckedAdd(kMaxInt64, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(std::numeric_limits<int64_t>::min(), -1), std::nullopt);
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMul(int64_t{1} << 32, int64_t{1} << 31), std::nullopt);
  // -2^63 is the one product of this size that still fits.
  EXPECT_EQ(CheckedMul(-(int64_t{1} << 32), int64_t{1} << 31), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(CheckedMul(-(int64_t{1} << 32), int64_t{1} << 32), std::nullopt);
  EXPECT_EQ(SaturatingAdd(kMaxInt64 - 1, 5), kMaxInt64);
  EXPECT_EQ(SaturatingAdd(40, 2), 42);
}

TEST(OptionCheckTest, IntegersSayTheirRangeInWords) {
  EXPECT_EQ(Message(CheckInteger("--batch", 0, 1)), "--batch must be a positive integer, got '0'");
  EXPECT_EQ(Message(CheckInteger("--save-every", -1, 0)),
            "--save-every must be a non-negative integer, got '-1'");
  EXPECT_EQ(Message(CheckInteger("--threads", 2000, 1, 1024)),
            "--threads must be an integer from 1 to 1024, got '2000'");
  EXPECT_TRUE(CheckInteger("--threads", 1024, 1, 1024).ok());
  EXPECT_EQ(Message(CheckInteger("", 0, 1)), "must be a positive integer, got '0'");
}

TEST(OptionCheckTest, ParsesOnlyWholeDecimalIntegersThatFit) {
  EXPECT_EQ(*ParseInteger("--batch", "16", 1), 16);
  EXPECT_EQ(*ParseInteger("--seed", "-5", std::numeric_limits<int64_t>::min()), -5);
  for (const char* bad : {"", "1.5", "1e3", "abc", "16 ", " 16", "+16", "0x10",
                          "99999999999999999999999", "-99999999999999999999999"}) {
    absl::StatusOr<int64_t> parsed = ParseInteger("--batch", bad, 1);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(Message(parsed.status()),
              fmt::format("--batch must be a positive integer, got '{}'", bad));
  }
  EXPECT_FALSE(ParseInteger("--batch", "0", 1).ok());
}

TEST(OptionCheckTest, NumbersRefuseNanAndInfinities) {
  EXPECT_EQ(*ParseNumber("--lr", "0.01", kPositiveNumber), 0.01);
  EXPECT_EQ(*ParseNumber("--lr", "1e-3", kPositiveNumber), 1e-3);
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "infinity", "1e400", "0", "-1", "x", ""}) {
    absl::StatusOr<double> parsed = ParseNumber("--lr", bad, kPositiveNumber);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(Message(parsed.status()), HasSubstr("--lr must be a positive number, got"));
  }
  EXPECT_FALSE(CheckNumber("--time-limit", std::nan(""), kPositiveNumber).ok());
  EXPECT_FALSE(
      CheckNumber("--time-limit", std::numeric_limits<double>::infinity(), kPositiveNumber).ok());
  EXPECT_EQ(Message(CheckNumber("--momentum", 1.0, kFraction)),
            "--momentum must be a number in [0, 1), got '1'");
  EXPECT_TRUE(CheckNumber("--momentum", 0.0, kFraction).ok());
  EXPECT_EQ(Message(CheckNumber("--weight-decay", -0.5, kNonNegativeNumber)),
            "--weight-decay must be a non-negative number, got '-0.5'");
}

TEST(OptionCheckTest, LongTextIsCutShort) {
  const std::string long_text(500, '9');
  absl::StatusOr<int64_t> parsed = ParseInteger("--batch", long_text, 1);
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(Message(parsed.status()).size(), 120u);
}

TEST(OptionCheckTest, EmptyAndBlankTextIsRefused) {
  EXPECT_EQ(Message(CheckNotEmpty("--freeze", "")), "--freeze must not be empty");
  EXPECT_FALSE(CheckNotEmpty("--freeze", "  ").ok());
  EXPECT_TRUE(CheckNotEmpty("--freeze", "backbone.").ok());
}

}  // namespace
}  // namespace spillway
