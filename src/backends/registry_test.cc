#include "backends/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/status_macros.h"

namespace spillway::backends {
namespace {

using ::testing::HasSubstr;

// A build configured with SPILLWAY_CPU_BACKEND=OFF (the gpu-check preset).
bool CpuLeftOut() {
  for (const BackendInfo& info : ListLeftOutBackends()) {
    if (info.name == "cpu") return true;
  }
  return false;
}

TEST(BackendRegistry, MakesEveryListedBackendUnderItsName) {
  ASSERT_FALSE(ListBackends().empty());
  // The default comes first: cpu, or in a build without it cuda (or reference).
  bool has_cuda = false;
  for (const BackendInfo& info : ListBackends()) has_cuda = has_cuda || info.name == "cuda";
  EXPECT_EQ(ListBackends().front().name, !CpuLeftOut() ? "cpu" : (has_cuda ? "cuda" : "reference"));
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
              HasSubstr(CpuLeftOut() ? "unknown backend 'gpu'; the backends are "
                                     : "unknown backend 'gpu'; the backends are cpu, reference"));
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
