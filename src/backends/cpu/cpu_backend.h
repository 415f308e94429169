// The CPU backend: "device memory" is host memory, kernels are oneDNN where
// it fits (with primitives cached per node shape, so a step does not
// re-create them), direct loops for the memory-bound ops of CNN training and
// the reference kernels elsewhere, and a copy is a memcpy on the calling
// stream's thread.
#pragma once

#include <memory>

#include "backends/backend.h"

namespace spillway::backends::cpu {

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
  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override;
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override;
  absl::Status Upload(void* device_destination, const void* host_source, int64_t bytes) override;
  absl::Status Download(void* host_destination, const void* device_source, int64_t bytes) override;

  // oneDNN primitives created so far: a step whose node shapes were all seen
  // before creates none.
  int64_t primitives_created() const;

 private:
  class Kernels;  // oneDNN engine, stream and primitive cache
  class Profile;  // kernel time per op kind
  CpuBackendOptions options_;
  std::unique_ptr<Profile> profile_;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace spillway::backends::cpu
