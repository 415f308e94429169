// A backend that hands every call to the reference backend: the base of the
// tests' instrumented backends, which override only what they watch or
// replace (counting allocations, running some ops another way).
#pragma once

#include <cstdint>
#include <string_view>

#include "backends/backend.h"
#include "backends/reference/reference_backend.h"

namespace spillway::backends::testing {

class ForwardingBackend : public Backend {
 public:
  std::string_view name() const override { return "forwarding"; }
  absl::StatusOr<void*> AllocateDevice(int64_t bytes) override {
    return inner_.AllocateDevice(bytes);
  }
  void FreeDevice(void* memory) override { inner_.FreeDevice(memory); }
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override { return inner_.AllocateHost(bytes); }
  void FreeHost(void* memory) override { inner_.FreeHost(memory); }
  AvailableMemory Available() const override { return inner_.Available(); }
  absl::Status RunKernel(program::Stream stream, const KernelCall& call) override {
    return inner_.RunKernel(stream, call);
  }
  absl::Status Copy(program::Stream stream, void* destination, const void* source,
                    int64_t bytes) override {
    return inner_.Copy(stream, destination, source, bytes);
  }
  absl::Status Upload(void* destination, const void* source, int64_t bytes) override {
    return inner_.Upload(destination, source, bytes);
  }
  absl::Status Download(void* destination, const void* source, int64_t bytes) override {
    return inner_.Download(destination, source, bytes);
  }

 protected:
  reference::ReferenceBackend& inner() { return inner_; }

 private:
  reference::ReferenceBackend inner_;
};

}  // namespace spillway::backends::testing
