// Replays each file-reader fuzzer's corpus (src/fuzz/corpus/<reader>)
// through the fuzz target's checks, so every build, the sanitizer ones
// included, catches a regression on an input that once found a new path
// through a reader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>

#include "fuzz/file_checks.h"

namespace spillway::fuzz {
namespace {

struct Target {
  const char* corpus;  // under src/fuzz/corpus
  std::function<absl::StatusOr<bool>(std::string_view)> check;
};

class CorpusReplay : public ::testing::TestWithParam<Target> {};

TEST_P(CorpusReplay, EveryInputParsesConsistentlyOrFailsCleanly) {
  const std::filesystem::path directory =
      std::filesystem::path(SPILLWAY_FUZZ_CORPORA) / GetParam().corpus;
  int inputs = 0;
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const absl::StatusOr<bool> accepted = GetParam().check(bytes.str());
    ASSERT_TRUE(accepted.ok()) << name << ": " << accepted.status();
    ++inputs;
    // The seeds (make_seed_corpus.py) say in their names which side of the
    // reader's checks they are on.
    if (name.starts_with("seed_")) {
      ++seeds;
      EXPECT_EQ(*accepted, !name.starts_with("seed_refused_")) << name;
    }
  }
  EXPECT_GT(seeds, 0) << "no seed_* inputs in " << directory;
  EXPECT_GT(inputs, 0);
}

INSTANTIATE_TEST_SUITE_P(Readers, CorpusReplay,
                         ::testing::Values(Target{"npy", CheckNpyBytes},
                                           Target{"hardware_profile", CheckHardwareProfileText},
                                           Target{"checkpoint", CheckCheckpointBytes},
                                           Target{"node_link", CheckNodeLinkText}),
                         [](const ::testing::TestParamInfo<Target>& param) {
                           return std::string(param.param.corpus);
                         });

}  // namespace
}  // namespace spillway::fuzz
