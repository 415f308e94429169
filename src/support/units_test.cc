#include "support/units.h"

#include <gtest/gtest.h>

namespace spillway {
namespace {

TEST(FormatBytes, UsesBinaryUnitsWithThreeDigits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{16} << 30), "16.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{300} << 20), "300 MiB");
  EXPECT_EQ(FormatBytes(-2048), "-2.00 KiB");
}

TEST(FormatSignedPercent, RoundsToATenthAndNeverReadsMinusZero) {
  EXPECT_EQ(FormatSignedPercent(0.042), "+4.2%");
  EXPECT_EQ(FormatSignedPercent(-0.007), "-0.7%");
  EXPECT_EQ(FormatSignedPercent(1.028), "+102.8%");
  EXPECT_EQ(FormatSignedPercent(0), "+0.0%");
  EXPECT_EQ(FormatSignedPercent(-1e-12), "+0.0%");
  EXPECT_EQ(FormatSignedPercent(-0.0004), "+0.0%");
}

TEST(FormatCount, UsesDecimalUnits) {
  EXPECT_EQ(FormatCount(950), "950");
  EXPECT_EQ(FormatCount(25557032), "25.6 M");
  EXPECT_EQ(FormatCount(4.09e9), "4.09 G");
}

TEST(ParseBytes, AcceptsPlainAndSuffixedSizes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096);
  EXPECT_EQ(*ParseBytes("16GiB"), int64_t{16} << 30);
  EXPECT_EQ(*ParseBytes("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseBytes("1.5gb"), 1500000000);
  EXPECT_EQ(*ParseBytes("2KB"), 2000);
  EXPECT_EQ(*ParseBytes("2PiB"), int64_t{2} << 50);
  EXPECT_EQ(*ParseBytes("3PB"), int64_t{3000000000000000});
}

TEST(ParseBytes, AcceptsScientificNotationAsProfilesDo) {
  EXPECT_EQ(*ParseBytes("1e9"), 1000000000);
  EXPECT_EQ(*ParseBytes("4.5E9"), 4500000000);
  EXPECT_EQ(*ParseBytes("1.5e3 MiB"), int64_t{1536000} << 10);
}

TEST(ParseBytes, RefusesAFractionOfAByte) {
  absl::StatusOr<int64_t> parsed = ParseBytes("1.5");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "'1.5' is not a whole number of bytes: give bytes as an integer, or a unit (1.5GiB)");
  EXPECT_FALSE(ParseBytes("2.5B").ok());
  EXPECT_EQ(*ParseBytes("1.1GB"), 1100000000);
}

TEST(ParseBytes, RejectsGarbageAndUnknownUnits) {
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("lots").ok());
  EXPECT_FALSE(ParseBytes("12 parsecs").ok());
  EXPECT_FALSE(ParseBytes("1e30TiB").ok());
  EXPECT_FALSE(ParseBytes("1e400").ok());
  EXPECT_FALSE(ParseBytes("9223372036854775808").ok());
  for (const char* bad : {"nan", "inf", "-1", "-5GiB", "e9", ".GiB", "1e"}) {
    EXPECT_FALSE(ParseBytes(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace spillway
