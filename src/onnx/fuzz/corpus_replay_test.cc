// Replays the fuzzer's corpus (src/onnx/fuzz/corpus) through the fuzz
// target's checks, so every build, the sanitizer ones included, catches a
// regression on an input that once found a new path through the importer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/fuzz/import_check.h"

namespace spillway::onnx::fuzz {
namespace {

struct CorpusFile {
  std::string name;
  std::string bytes;
};

std::vector<CorpusFile> ReadCorpus() {
  std::vector<CorpusFile> files;
  for (const auto& entry : std::filesystem::directory_iterator(SPILLWAY_ONNX_FUZZ_CORPUS)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    files.push_back({entry.path().filename().string(), bytes.str()});
  }
  return files;
}

bool IsSeed(const CorpusFile& file) { return file.name.starts_with("seed_"); }

TEST(OnnxFuzzCorpusTest, EveryInputImportsOrFailsCleanlyUnderEveryVariant) {
  const std::vector<CorpusFile> corpus = ReadCorpus();
  ASSERT_FALSE(corpus.empty()) << "no corpus in " << SPILLWAY_ONNX_FUZZ_CORPUS;
  for (const CorpusFile& file : corpus) {
    for (const ImportOptions& options : OptionVariants(file.bytes)) {
      const absl::StatusOr<bool> checked = ImportAndCheck(file.bytes, options);
      EXPECT_TRUE(checked.ok()) << file.name << ": " << checked.status();
    }
  }
}

// The seeds are valid models of supported ops (make_seed_corpus.py): each
// imports, so the fuzzer starts from inputs that reach past the checker.
TEST(OnnxFuzzCorpusTest, SeedModelsImport) {
  int seeds = 0;
  for (const CorpusFile& file : ReadCorpus()) {
    if (!IsSeed(file)) continue;
    ++seeds;
    const absl::StatusOr<ImportedModel> imported = ImportModel(file.bytes, ImportOptions());
    EXPECT_TRUE(imported.ok()) << file.name << ": " << imported.status();
  }
  EXPECT_GT(seeds, 0);
}

}  // namespace
}  // namespace spillway::onnx::fuzz
