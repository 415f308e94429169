// The static memory layout: an offset in one arena for every device buffer.
//
// Layout algorithms are strategies behind one small interface (as XLA's heap
// simulator does): they are told, in program order, when each buffer becomes
// live and when it dies, and at the end say where each buffer goes and how
// large the arena is. Two buffers may share bytes only if one is freed before
// the other is allocated in that order; the rewriter turns each such reuse
// into an event dependency so that it also holds in time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace spillway::program {

struct HeapLayout {
  std::map<int32_t, int64_t> offsets;  // buffer id -> offset
  int64_t arena_bytes = 0;             // the end of the highest buffer
};

class HeapAlgorithm {
 public:
  virtual ~HeapAlgorithm() = default;
  virtual void Alloc(int32_t buffer, int64_t bytes) = 0;
  virtual void Free(int32_t buffer) = 0;
  virtual HeapLayout Finish() = 0;
};

// Best fit: each allocation takes the smallest free gap that holds it (ties:
// the lowest offset); with no gap large enough it goes at the end of the arena,
// growing into a free gap that touches the end if there is one. Offsets are
// aligned to `alignment` bytes (256, cudaMalloc's alignment).
class BestFitHeap final : public HeapAlgorithm {
 public:
  explicit BestFitHeap(int64_t alignment = 256);
  void Alloc(int32_t buffer, int64_t bytes) override;
  void Free(int32_t buffer) override;
  HeapLayout Finish() override;

 private:
  struct Block {
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  int64_t RoundUp(int64_t bytes) const;

  int64_t alignment_;
  std::map<int64_t, int64_t> free_gaps_;  // offset -> bytes; none reaches `end_`
  std::map<int32_t, Block> live_;         // buffer -> where it is
  int64_t end_ = 0;                       // current top of the arena
  HeapLayout layout_;
};

// Records the calls it receives and forwards them to another algorithm (or to
// none), so tests can check what a caller asked for.
class HeapCallRecorder final : public HeapAlgorithm {
 public:
  explicit HeapCallRecorder(std::unique_ptr<HeapAlgorithm> inner = nullptr)
      : inner_(std::move(inner)) {}
  void Alloc(int32_t buffer, int64_t bytes) override;
  void Free(int32_t buffer) override;
  HeapLayout Finish() override;
  // "alloc 3 1024", "free 3", in call order.
  const std::vector<std::string>& calls() const { return calls_; }

 private:
  std::unique_ptr<HeapAlgorithm> inner_;
  std::vector<std::string> calls_;
};

}  // namespace spillway::program
