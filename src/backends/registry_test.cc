#include "backends/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/status_macros.h"

namespace spillway::backends {
namespace {

using ::testing::HasSubstr;

TEST(BackendRegistry, MakesEveryListedBackendUnderItsName) {
  ASSERT_FALSE(ListBackends().empty());
  EXPECT_EQ(ListBackends().front().name, "cpu");  // the default comes first
  for (const BackendInfo& info : ListBackends()) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(info.name, {.threads = 1});
    // A GPU backend built on a machine without a GPU says so, in one line.
    if (info.name == "cuda" && backend.status().code() == absl::StatusCode::kFailedPrecondition) {
      EXPECT_THAT(StatusMessage(backend.status()), HasSubstr("no usable CUDA device"));
      continue;
    }
    ASSERT_TRUE(backend.ok()) << info.name << ": " << StatusMessage(backend.status());
    EXPECT_EQ((*backend)->name(), info.name);
    EXPECT_FALSE(info.description.empty());
  }
}

TEST(BackendRegistry, AnUnknownNameListsTheKnownOnes) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend("gpu", {});
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(StatusMessage(backend.status()),
              HasSubstr("unknown backend 'gpu'; the backends are cpu, reference"));
}

// Empty in the default build; with SPILLWAY_CPU_BACKEND=OFF, the cpu backend.
TEST(BackendRegistry, ABackendLeftOutOfTheBuildIsUnknownAndSaysWhy) {
  for (const BackendInfo& info : ListLeftOutBackends()) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(info.name, {});
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(StatusMessage(backend.status()), HasSubstr(info.description));
  }
}

}  // namespace
}  // namespace spillway::backends
