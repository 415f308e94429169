#include "support/terminal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace spillway {
namespace {

TEST(FitLine, CutsWithAnEllipsisLeavingTheLastColumn) {
  EXPECT_EQ(FitLine("planning hybrid: 12 candidate plans, 0.4 s", 0),
            "planning hybrid: 12 candidate plans, 0.4 s");
  EXPECT_EQ(FitLine("planning hybrid: 12 candidate plans, 0.4 s", 80),
            "planning hybrid: 12 candidate plans, 0.4 s");
  EXPECT_EQ(FitLine("planning hybrid: 12 candidate plans, 0.4 s", 20), "planning hybrid:...");
  EXPECT_EQ(FitLine("abcdef", 7), "abcdef");
  EXPECT_EQ(FitLine("abcdefg", 7), "abc...");
  EXPECT_EQ(FitLine("abcdefg", 3), "ab");
  EXPECT_EQ(FitLine("abcdefg", 1), "");
}

TEST(FitFields, LeavesOutTheLeastImportantFirstAndKeepsTheOrder) {
  const std::vector<LineField> fields = {{"aaaa", 0}, {"bbbb", 2}, {"cccc", 1}, {"dddd", 3}};
  EXPECT_EQ(FitFields(fields, "  ", 0), "aaaa  bbbb  cccc  dddd");
  EXPECT_EQ(FitFields(fields, "  ", 23), "aaaa  bbbb  cccc  dddd");
  EXPECT_EQ(FitFields(fields, "  ", 22), "aaaa  bbbb  cccc");
  EXPECT_EQ(FitFields(fields, "  ", 16), "aaaa  cccc");
  EXPECT_EQ(FitFields(fields, "  ", 6), "aaaa");
  EXPECT_EQ(FitFields(fields, "  ", 4), "aaa");
}

TEST(TerminalColumns, FallsBackToColumnsThenEighty) {
  if (isatty(STDERR_FILENO)) GTEST_SKIP() << "stderr is a terminal: its width comes first";
  const int not_a_terminal = -1;
  ASSERT_EQ(setenv("COLUMNS", "57", 1), 0);
  EXPECT_EQ(TerminalColumns(not_a_terminal), 57);
  ASSERT_EQ(setenv("COLUMNS", "wide", 1), 0);
  EXPECT_EQ(TerminalColumns(not_a_terminal), 80);
  ASSERT_EQ(unsetenv("COLUMNS"), 0);
  EXPECT_EQ(TerminalColumns(not_a_terminal), 80);
}

}  // namespace
}  // namespace spillway
