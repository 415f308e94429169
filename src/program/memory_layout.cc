#include "program/memory_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "support/check.h"

namespace spillway::program {

BestFitHeap::BestFitHeap(int64_t alignment) : alignment_(alignment) {
  SPILLWAY_CHECK(alignment > 0, "heap alignment must be positive");
}

int64_t BestFitHeap::RoundUp(int64_t bytes) const {
  return (bytes + alignment_ - 1) / alignment_ * alignment_;
}

void BestFitHeap::Alloc(int32_t buffer, int64_t bytes) {
  SPILLWAY_CHECK(bytes >= 0, "a buffer cannot have negative size");
  SPILLWAY_CHECK(!live_.contains(buffer), "buffer allocated twice without a free in between");

  // A zero-byte buffer overlaps nothing, so it can sit anywhere. Offset 0 is
  // aligned and inside every arena (even an empty one), and keeping it out of
  // the gap bookkeeping means it can never split a gap or move the top.
  if (bytes == 0) {
    live_[buffer] = Block{0, 0};
    layout_.offsets[buffer] = 0;
    return;
  }

  const int64_t rounded = RoundUp(bytes);
  // Every gap offset is a multiple of the alignment because every block size
  // is, so the gap's start is a valid offset as is.
  auto best = free_gaps_.end();
  for (auto gap = free_gaps_.begin(); gap != free_gaps_.end(); ++gap) {
    // Strictly smaller: on a tie the earlier (lower) offset stays chosen.
    if (gap->second >= rounded && (best == free_gaps_.end() || gap->second < best->second)) {
      best = gap;
    }
  }

  int64_t offset = 0;
  if (best != free_gaps_.end()) {
    offset = best->first;
    const int64_t remainder = best->second - rounded;
    free_gaps_.erase(best);
    if (remainder > 0) free_gaps_.emplace(offset + rounded, remainder);
  } else {
    // Nothing holds it: it goes on top. Free never leaves a gap touching the
    // top (it lowers end_ instead), so starting at end_ is the same as starting
    // at the top gap: the arena grows only by what that gap lacks.
    offset = end_;
    end_ = offset + rounded;
    layout_.arena_bytes = std::max(layout_.arena_bytes, end_);
  }

  live_[buffer] = Block{offset, rounded};
  // A buffer id that is freed and allocated again keeps its latest placement.
  layout_.offsets[buffer] = offset;
}

void BestFitHeap::Free(int32_t buffer) {
  const auto it = live_.find(buffer);
  SPILLWAY_CHECK(it != live_.end(), "freeing a buffer that is not live");
  Block block = it->second;
  live_.erase(it);
  if (block.bytes == 0) return;

  // Merge with the gap just below, then with the gap just above, so no two gaps
  // ever touch: otherwise a buffer that fits their union would miss both.
  auto next = free_gaps_.lower_bound(block.offset);
  if (next != free_gaps_.begin()) {
    const auto below = std::prev(next);
    if (below->first + below->second == block.offset) {
      block.offset = below->first;
      block.bytes += below->second;
      free_gaps_.erase(below);
    }
  }
  if (next != free_gaps_.end() && block.offset + block.bytes == next->first) {
    block.bytes += next->second;
    free_gaps_.erase(next);
  }

  // Gaps live strictly below the top; a gap reaching it is just a lower top.
  // arena_bytes keeps the maximum, since the arena must hold the highest point.
  if (block.offset + block.bytes == end_) {
    end_ = block.offset;
  } else {
    free_gaps_.emplace(block.offset, block.bytes);
  }
}

HeapLayout BestFitHeap::Finish() { return layout_; }

void HeapCallRecorder::Alloc(int32_t buffer, int64_t bytes) {
  calls_.push_back(fmt::format("alloc {} {}", buffer, bytes));
  if (inner_ != nullptr) inner_->Alloc(buffer, bytes);
}

void HeapCallRecorder::Free(int32_t buffer) {
  calls_.push_back(fmt::format("free {}", buffer));
  if (inner_ != nullptr) inner_->Free(buffer);
}

HeapLayout HeapCallRecorder::Finish() {
  if (inner_ != nullptr) return inner_->Finish();
  return HeapLayout{};
}

}  // namespace spillway::program
