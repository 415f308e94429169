// The static memory layout: an offset in one arena for every device buffer.
//
// Layout algorithms are strategies behind one small interface (as XLA's heap
// simulator does): they are told, in program order, when each buffer becomes
// live and when it dies, and at the end say where each buffer goes and how
// large the arena is. Two buffers may share bytes only if one is freed before
// the other is allocated in that order; the rewriter turns each such reuse
// into an event dependency so that it also holds in time.
#pragma once

#include <absl/container/btree_map.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace spillway::program {

// The arena layout's alignment unless told otherwise: cudaMalloc's, which
// covers every backend's.
inline constexpr int64_t kArenaAlignment = 256;

struct HeapLayout {
  // (buffer id, offset), in the order the buffers were allocated: an id
  // allocated again after its free appears again, its latest placement last.
  // A flat list, not a map: a planner makes several layouts per candidate,
  // thousands a planning. Offsets() gives the id -> offset map it describes.
  std::vector<std::pair<int32_t, int64_t>> placements;
  int64_t arena_bytes = 0;  // the end of the highest buffer
  int64_t alignment = 1;    // every offset is a multiple of it
  // False when the algorithm gave up part way, as soon as the arena passed a
  // size its caller would reject (the heaps' `give_up_above`): arena_bytes
  // is then past that size, and the placements are not all there. Such a
  // layout is for rejecting, never for applying.
  bool complete = true;

  // Each buffer's latest placement.
  absl::btree_map<int32_t, int64_t> Offsets() const;
};

class HeapAlgorithm {
 public:
  virtual ~HeapAlgorithm() = default;
  virtual void Alloc(int32_t buffer, int64_t bytes) = 0;
  virtual void Free(int32_t buffer) = 0;
  virtual HeapLayout Finish() = 0;
  // True once the algorithm has given up (HeapLayout::complete): the calls
  // after that change nothing, so a caller may stop making them.
  virtual bool gave_up() const { return false; }
};

// Best fit: each allocation takes the smallest free gap that holds it (ties:
// the lowest offset); with no gap large enough it goes at the end of the arena,
// growing into a free gap that touches the end if there is one. Offsets are
// aligned to `alignment` bytes (256, cudaMalloc's alignment).
//
// The arena only grows, so a caller that keeps the layout only if its arena
// is at most some size can say so (`give_up_above`): the heap gives up at the
// first Alloc that takes the arena past it, and Finish returns an incomplete
// layout whose arena_bytes is past it. A layout that fits comes out exactly
// as without the limit.
class BestFitHeap final : public HeapAlgorithm {
 public:
  explicit BestFitHeap(int64_t alignment = kArenaAlignment,
                       int64_t give_up_above = std::numeric_limits<int64_t>::max());
  void Alloc(int32_t buffer, int64_t bytes) override;
  void Free(int32_t buffer) override;
  HeapLayout Finish() override;
  bool gave_up() const override { return arena_bytes_ > give_up_above_; }

 private:
  struct Block {
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  int64_t RoundUp(int64_t bytes) const;

  int64_t alignment_;
  int64_t give_up_above_;
  // The free gaps below the top, by offset; no two touch and none reaches
  // `end_`. A flat vector, scanned for the best fit up to the first gap of
  // exactly the size (a repeated layer's tensors often find one): a step's
  // arena has few gaps at once (33 on average and 194 at most in the
  // 48-layer GPT-2's planning, 4 and 18 in ResNet-152's), where two B-trees
  // (by offset, and by size for the fit) cost more to keep than the scan;
  // a B-tree by size was slower on a 200-layer GPT-2 too.
  std::vector<Block> gaps_;
  // By buffer id (ids are small and dense: a Program's count from 0): where
  // each live buffer is; bytes < 0 where it is not live.
  std::vector<Block> live_;
  int64_t end_ = 0;                                      // current top of the arena
  int64_t arena_bytes_ = 0;                              // the highest top so far
  std::vector<std::pair<int32_t, int64_t>> placements_;  // (buffer, offset), in Alloc order
};

// Global decreasing-size best fit (the idea behind XLA's "global decreasing
// size best fit" heap). Alloc and Free only record each buffer's live interval
// on a logical clock; Finish lays out all of them at once, largest first, so
// that small buffers fill in around large ones instead of the other way round.
// That can pack tighter than the online BestFitHeap, but is not sure to: on
// the bundled models' training programs the two arenas are within about 1%.
//
// Time: every call (Alloc or Free, zero-byte buffers included) takes the next
// tick of the clock, 0, 1, 2, ... A buffer is live on [its Alloc's tick, its
// Free's tick); one never freed is live to the end. No two calls share a tick,
// so two intervals overlap exactly when each buffer is allocated before the
// other is freed: a buffer freed by an earlier call than another's Alloc may
// share bytes with it, one freed by a later call may not. That is the same
// rule as BestFitHeap's, so the rewriter's reuse events stay valid.
//
// Finish places buffers by decreasing rounded size (ties: earlier Alloc first,
// then lower buffer id). Each goes into the smallest free gap (ties: lowest
// offset) between the already placed buffers whose intervals overlap its own;
// with no gap large enough it goes on top of those buffers, at the highest end
// among them, which may be below the arena's top. arena_bytes is the highest
// end of all. Finish changes nothing, so it may be called again after more
// calls, and each buffer not yet freed is then live to that later end.
//
// A caller that keeps the layout only if its arena is at most some size can
// say so (`give_up_above`): the arena only grows as buffers are placed, so
// Finish stops at the first buffer that takes it past that size and returns
// an incomplete layout (HeapLayout::complete), whose arena_bytes is past it.
// Up to that point the placement is the same, so a layout that fits comes
// out exactly as without the limit.
//
// Zero-byte buffers sit at offset 0 and never grow the arena, as in
// BestFitHeap. An id may be allocated again after it is freed; each Alloc is a
// new interval, placed on its own, and `offsets` reports the id's latest
// Alloc (as BestFitHeap reports its latest placement). Offsets are aligned to
// `alignment` bytes.
//
// Cost: Alloc and Free are O(1) on average. Finish sorts the n buffers, then
// for each reads O(log n) unions of taken byte ranges from a segment tree over
// time (one for the buffers placed that cover the start of its lifetime, one
// for those that start within it: no buffer is read twice; buffers that
// overlap every other, such as parameters, are kept apart in one union) and
// folds them into one, so it pays for the runs of contiguous taken bytes
// around the buffer's lifetime rather than for every buffer that overlaps it
// (long-lived buffers side by side count as one run). A 10,000-buffer GPT-2
// training program takes about 20 ms.
class DecreasingSizeBestFitHeap final : public HeapAlgorithm {
 public:
  explicit DecreasingSizeBestFitHeap(int64_t alignment = kArenaAlignment,
                                     int64_t give_up_above = std::numeric_limits<int64_t>::max());
  void Alloc(int32_t buffer, int64_t bytes) override;
  void Free(int32_t buffer) override;
  HeapLayout Finish() override;

 private:
  struct Interval {
    int32_t buffer = 0;
    int64_t bytes = 0;  // rounded up to the alignment
    int64_t start = 0;  // the Alloc's tick
    int64_t end = 0;    // the Free's tick; kLiveToTheEnd until then
  };
  int64_t RoundUp(int64_t bytes) const;

  int64_t alignment_;
  int64_t give_up_above_;
  int64_t clock_ = 0;                // the tick of the next call
  std::vector<Interval> intervals_;  // in Alloc order, so by start
  // By buffer id, the index of its open interval in intervals_, -1 when it
  // has none (ids are small and dense, so a vector rather than a hash map).
  std::vector<int64_t> live_;
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
