#include "backends/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "backends/cpu/direct_kernels.h"
#include "backends/cpu/onednn_kernels.h"
#include "backends/host_memory.h"
#include "backends/reference/reference_kernels.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "ir/op_kind.h"
#include "support/status_macros.h"

namespace spillway::backends::cpu {

std::string_view KernelSetName(KernelSet set) {
  switch (set) {
    case KernelSet::kOneDnn:
      return "oneDNN";
    case KernelSet::kDirect:
      return "direct loops";
    case KernelSet::kReference:
      break;
  }
  return "reference";
}

// The calling thread's OpenMP team size for one scope. oneDNN (built with
// OpenMP) sizes a primitive's parallel work by it, both when it creates the
// primitive and when it runs it, and the results depend on that split.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : previous_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(previous_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int previous_;
};

// The kernel sets, and which takes a call.
class CpuBackend::Kernels {
 public:
  explicit Kernels(int threads) : threads_(std::max(1, threads)) {}

  // oneDNN is asked first (which builds and caches the node shape's
  // primitives, or remembers that it has none), then the direct loops.
  KernelSet SetFor(const KernelCall& call) {
    const ScopedOmpThreads threads(threads_);
    if (!onednn_.Implementation(call).empty()) return KernelSet::kOneDnn;
    if (DirectKernelTakes(call)) return KernelSet::kDirect;
    return KernelSet::kReference;
  }

  // The same order, asking each set in turn: oneDNN's Run declines exactly
  // the calls it has no Implementation for, and RunDirectKernel those
  // DirectKernelTakes refuses, so a call runs on SetFor(call) without the
  // tests being made twice.
  absl::Status Run(const KernelCall& call) {
    const ScopedOmpThreads threads(threads_);
    ASSIGN_OR_RETURN(bool done, onednn_.Run(call));
    if (done) return absl::OkStatus();
    ASSIGN_OR_RETURN(done, RunDirectKernel(call, threads_));
    if (done) return absl::OkStatus();
    return reference::RunReferenceKernel<float>(call);
  }

  int64_t primitives_created() const { return onednn_.primitives_created(); }

 private:
  int threads_;
  OneDnnKernels onednn_;
};

// Kernel calls and seconds per op kind, printed largest first.
class CpuBackend::Profile {
 public:
  void Add(ir::OpKind op, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& entry = entries_[static_cast<size_t>(op)];
    ++entry.calls;
    entry.seconds += seconds;
  }

  ~Profile() {
    std::array<int, ir::kNumOpKinds> order{};
    for (int i = 0; i < ir::kNumOpKinds; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return entries_[static_cast<size_t>(a)].seconds > entries_[static_cast<size_t>(b)].seconds;
    });
    double total = 0.0;
    for (const Entry& entry : entries_) total += entry.seconds;
    std::fprintf(stderr, "cpu backend kernel time per op (%.3f s in all):\n", total);
    for (int i : order) {
      const Entry& entry = entries_[static_cast<size_t>(i)];
      if (entry.calls == 0) continue;
      const std::string_view name = ir::OpName(static_cast<ir::OpKind>(i));
      std::fprintf(stderr, "  %-28.*s %8lld calls %9.3f s %5.1f%%\n", static_cast<int>(name.size()),
                   name.data(), static_cast<long long>(entry.calls), entry.seconds,
                   100.0 * entry.seconds / total);
    }
  }

 private:
  struct Entry {
    int64_t calls = 0;
    double seconds = 0.0;
  };
  std::mutex mutex_;
  std::array<Entry, ir::kNumOpKinds> entries_{};
};

namespace {
bool ProfileRequested(const CpuBackendOptions& options) {
  const char* variable = std::getenv("SPILLWAY_CPU_PROFILE");
  return options.profile || (variable != nullptr && std::string_view(variable) != "0");
}
}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options)
    : options_(options),
      profile_(ProfileRequested(options) ? std::make_unique<Profile>() : nullptr),
      kernels_(std::make_unique<Kernels>(options.threads)) {}

CpuBackend::~CpuBackend() = default;

absl::StatusOr<void*> CpuBackend::AllocateDevice(int64_t bytes) {
  return AllocateAligned(bytes, "cpu device arena");
}

void CpuBackend::FreeDevice(void* memory) { FreeAligned(memory); }

absl::StatusOr<void*> CpuBackend::AllocateHost(int64_t bytes) {
  return AllocateAligned(bytes, "cpu host memory");
}

void CpuBackend::FreeHost(void* memory) { FreeAligned(memory); }

AvailableMemory CpuBackend::Available() const {
  const std::optional<int64_t> bytes = AvailableHostBytes();
  return {.device_bytes = bytes, .host_bytes = bytes, .shared = true};
}

absl::Status CpuBackend::RunKernel(program::Stream /*stream*/, const KernelCall& call) {
  if (profile_ == nullptr) return kernels_->Run(call);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = kernels_->Run(call);
  profile_->Add(call.node.op,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return status;
}

absl::Status CpuBackend::Copy(program::Stream /*stream*/, void* destination, const void* source,
                              int64_t bytes) {
  std::memcpy(destination, source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::Upload(void* device_destination, const void* host_source, int64_t bytes) {
  std::memcpy(device_destination, host_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(void* host_destination, const void* device_source,
                                  int64_t bytes) {
  std::memcpy(host_destination, device_source, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

KernelSet CpuBackend::KernelSetFor(const KernelCall& call) { return kernels_->SetFor(call); }

absl::Status CpuBackend::Prepare(const program::Program& /*program*/) {
  std::lock_guard lock(prepared_mutex_);
  prepared_calls_.fill(0);
  reference_ops_.clear();
  return absl::OkStatus();
}

absl::Status CpuBackend::PrepareKernel(const KernelCall& call) {
  const KernelSet set = kernels_->SetFor(call);
  std::lock_guard lock(prepared_mutex_);
  ++prepared_calls_[static_cast<size_t>(set)];
  if (set == KernelSet::kReference) reference_ops_.emplace(ir::OpName(call.node.op));
  return absl::OkStatus();
}

std::string CpuBackend::KernelSummary() const {
  std::lock_guard lock(prepared_mutex_);
  std::string summary;
  for (int i = 0; i < kNumKernelSets; ++i) {
    const auto set = static_cast<KernelSet>(i);
    summary += fmt::format("{}{} {}{}", i == 0 ? "" : ", ", KernelSetName(set),
                           prepared_calls_[static_cast<size_t>(i)], i == 0 ? " calls" : "");
  }
  if (!reference_ops_.empty()) summary += fmt::format(" ({})", fmt::join(reference_ops_, ", "));
  return summary;
}

int64_t CpuBackend::primitives_created() const { return kernels_->primitives_created(); }

}  // namespace spillway::backends::cpu
