#include "support/file_io.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/status_macros.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::path(::testing::TempDir()) /
                 ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string Path(const std::string& name) const { return (directory_ / name).string(); }
  static std::string Contents(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }
  // Every entry of the directory, so a test can see that no temporary is left.
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(directory_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path directory_;
};

TEST_F(FileIoTest, ReadsAWholeFileWithinItsLimit) {
  ASSERT_TRUE(WriteFileAtomically(Path("a.txt"), "hello", "text").ok());
  EXPECT_EQ(*ReadFileToString(Path("a.txt"), 5, "text"), "hello");
}

TEST_F(FileIoTest, RefusesAFileOverItsLimitBeforeReadingIt) {
  ASSERT_TRUE(WriteFileAtomically(Path("a.txt"), "hello", "text").ok());
  absl::StatusOr<std::string> read = ReadFileToString(Path("a.txt"), 4, "text");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StatusMessage(read.status()),
              HasSubstr("is larger than 4 B, the most a text may be"));
}

TEST_F(FileIoTest, RefusesADevice) {
  absl::StatusOr<std::string> read = ReadFileToString("/dev/zero", 1 << 20, "ONNX file");
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(StatusMessage(read.status()), HasSubstr("'/dev/zero' is a device, not a file"));
}

// A pipe has no size to check first: it is read up to the limit and refused past it.
TEST_F(FileIoTest, StopsReadingAPipeAtTheLimit) {
  constexpr size_t kLimit = 1 << 20;
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  std::thread writer([&] {
    const std::string chunk(4096, 'x');
    for (size_t written = 0; written <= kLimit; written += chunk.size()) {
      if (::write(ends[1], chunk.data(), chunk.size()) < 0) break;
    }
    ::close(ends[1]);
  });
  absl::StatusOr<std::string> read =
      ReadFileToString(fmt::format("/proc/self/fd/{}", ends[0]), kLimit, "ONNX file");
  writer.join();
  ::close(ends[0]);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(StatusMessage(read.status()), HasSubstr("is larger than 1.00 MiB"));
}

TEST_F(FileIoTest, NamesTheReasonAFileCannotBeRead) {
  absl::StatusOr<std::string> missing = ReadFileToString(Path("missing"), 100, "checkpoint");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      StatusMessage(missing.status()),
      HasSubstr("cannot open checkpoint '" + Path("missing") + "': No such file or directory"));
  absl::StatusOr<std::string> directory = ReadFileToString(directory_.string(), 100, "checkpoint");
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(StatusMessage(directory.status()), HasSubstr("is a directory, not a file"));
}

TEST_F(FileIoTest, AWriteReplacesTheFileWholeAndLeavesNoTemporary) {
  ASSERT_TRUE(WriteFileAtomically(Path("out.json"), "old", "plan").ok());
  ASSERT_TRUE(WriteFileAtomically(Path("out.json"), "new contents", "plan").ok());
  EXPECT_EQ(Contents(Path("out.json")), "new contents");
  EXPECT_EQ(Entries(), std::vector<std::string>{"out.json"});
}

TEST_F(FileIoTest, OutputPathsAreCheckedWithTheirReason) {
  EXPECT_TRUE(CheckOutputPath(Path("new.svg"), "memory plot").ok());
  absl::Status missing_directory = CheckOutputPath(Path("no/such/dir/plot.svg"), "memory plot");
  EXPECT_THAT(StatusMessage(missing_directory), HasSubstr("No such file or directory"));
  absl::Status directory = CheckOutputPath(directory_.string(), "trace");
  EXPECT_THAT(StatusMessage(directory), HasSubstr("it is a directory"));
  ASSERT_TRUE(WriteFileAtomically(Path("file"), "x", "text").ok());
  absl::Status under_a_file = CheckOutputPath(Path("file") + "/plot.svg", "memory plot");
  EXPECT_THAT(StatusMessage(under_a_file), HasSubstr("is not a directory"));
  EXPECT_FALSE(CheckOutputPath("", "trace").ok());
}

TEST_F(FileIoTest, FilesWrittenTogetherAppearAllOrNone) {
  ASSERT_TRUE(WriteFileAtomically(Path("a.npy"), "previous", "output").ok());
  {
    OutputFiles files;
    ASSERT_TRUE(files.Add(Path("a.npy"), "first", "output").ok());
    EXPECT_FALSE(files.Add(Path("missing/b.npy"), "second", "output").ok());
    // Not committed: the staged file goes away and the old one stays.
  }
  EXPECT_EQ(Contents(Path("a.npy")), "previous");
  EXPECT_EQ(Entries(), std::vector<std::string>{"a.npy"});

  OutputFiles files;
  ASSERT_TRUE(files.Add(Path("a.npy"), "first", "output").ok());
  ASSERT_TRUE(files.Add(Path("b.npy"), "second", "output").ok());
  EXPECT_EQ(Contents(Path("a.npy")), "previous");  // nothing moves before Commit
  ASSERT_TRUE(files.Commit().ok());
  EXPECT_EQ(Contents(Path("a.npy")), "first");
  EXPECT_EQ(Contents(Path("b.npy")), "second");
  EXPECT_EQ(Entries(), (std::vector<std::string>{"a.npy", "b.npy"}));
}

}  // namespace
}  // namespace spillway
