// The CPU backend: "device memory" is host memory, kernels are oneDNN where
// it fits (with primitives cached per node shape, so a step does not
// re-create them), direct loops for the memory-bound ops of CNN training and
// the reference kernels elsewhere, and a copy is a memcpy on the calling
// stream's thread.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "backends/backend.h"

namespace spillway::backends::cpu {

// The three kernel sets of the CPU backend. A call goes to the first that
// takes its op, dtypes, attributes and shapes: oneDNN, then the direct loops
// (direct_kernels.h), then the reference kernels, which take every call (and
// are slow: a training step that needs them says so, KernelSummary).
enum class KernelSet { kOneDnn, kDirect, kReference };
inline constexpr int kNumKernelSets = 3;
std::string_view KernelSetName(KernelSet set);  // "oneDNN", "direct loops", "reference"

struct CpuBackendOptions {
  // Threads each kernel may use (an OpenMP team: oneDNN's and the direct
  // loops'). Results are bitwise reproducible for a given count. Where other
  // work competes for the cores, run with OMP_WAIT_POLICY=PASSIVE: libgomp's
  // spinning at barriers otherwise takes the CPU from the threads it waits for
  // (a ResNet-50 step on a loaded 2-core machine took 2.3 times as long). The
  // `spillway` binary sets it when the environment does not.
  int threads = 1;
  // Accumulate the wall time of kernels per op kind and print the table to
  // stderr when the backend is destroyed. Also on when the environment sets
  // SPILLWAY_CPU_PROFILE (to anything but 0).
  bool profile = false;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override;
  void FreeDevice(void* memory) override;
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override;
  void FreeHost(void* memory) override;
  // Device and host memory are the machine's memory.
  AvailableMemory Available() const override;
  // Runs the call on KernelSetFor(call).
  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override;
  // Starts KernelSummary's count afresh for the Program.
  absl::Status Prepare(const program::Program& program) override;
  // Chooses the call's kernel set (building oneDNN's primitives for it) and
  // counts it for KernelSummary.
  absl::Status PrepareKernel(const KernelCall& call) override;
  // The calls prepared since the last Prepare per kernel set, and the ops of
  // those on the reference kernels: "oneDNN 97 calls, direct loops 122,
  // reference 5 (cross_entropy_loss, ...)".
  std::string KernelSummary() const override;
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override;
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override;
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override;

  // The set whose kernel runs the call.
  KernelSet KernelSetFor(const KernelCall& call);

  // oneDNN primitives created so far: a step whose node shapes were all seen
  // before creates none.
  int64_t primitives_created() const;

 private:
  class Kernels;  // oneDNN engine, stream and primitive cache
  class Profile;  // kernel time per op kind
  CpuBackendOptions options_;
  std::unique_ptr<Profile> profile_;
  std::unique_ptr<Kernels> kernels_;
  mutable std::mutex prepared_mutex_;
  std::array<int64_t, kNumKernelSets> prepared_calls_{};  // per KernelSet
  std::set<std::string, std::less<>> reference_ops_;      // of the prepared calls
};

}  // namespace spillway::backends::cpu
