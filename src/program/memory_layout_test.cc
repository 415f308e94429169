#include "program/memory_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace spillway::program {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

// Unless a test says otherwise the heap uses the default 256-byte alignment.

TEST(BestFitHeap, ReusesAFreedGap) {
  // a=1000 -> [0,1024); b=2000 -> [1024,3072); free a leaves the gap [0,1024);
  // c=512 fits there, at 0; the arena never passes 3072.
  BestFitHeap heap;
  heap.Alloc(1, 1000);
  heap.Alloc(2, 2000);
  heap.Free(1);
  heap.Alloc(3, 512);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.offsets, ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 0)));
  EXPECT_EQ(layout.arena_bytes, 3072);
}

TEST(BestFitHeap, PicksTheSmallestGapThatFits) {
  // a=1024 -> [0,1024); b=256 -> [1024,1280); c=512 -> [1280,1792);
  // d=256 -> [1792,2048). Freeing a and c leaves gaps of 1024 at 0 and 512 at
  // 1280. e=512 fits both and takes the smaller one, at 1280, although the
  // larger one is lower; f=1024 then still finds a gap, at 0.
  BestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Alloc(2, 256);
  heap.Alloc(3, 512);
  heap.Alloc(4, 256);
  heap.Free(1);
  heap.Free(3);
  heap.Alloc(5, 512);
  heap.Alloc(6, 1024);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(5), 1280);
  EXPECT_EQ(layout.offsets.at(6), 0);
  EXPECT_EQ(layout.arena_bytes, 2048);
}

TEST(BestFitHeap, SkipsGapsThatAreTooSmall) {
  // a, b, c = 256 each at 0, 256, 512. Freeing b leaves a 256-byte gap that a
  // 512-byte d cannot use: d goes on top at 768.
  BestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Alloc(2, 256);
  heap.Alloc(3, 256);
  heap.Free(2);
  heap.Alloc(4, 512);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(4), 768);
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(BestFitHeap, EqualGapsGoToTheLowestOffset) {
  // a..e = 256 each at 0, 256, 512, 768, 1024. Freeing d then b leaves two
  // 256-byte gaps, at 768 and 256; the tie goes to 256 whatever the free order.
  BestFitHeap heap;
  for (int32_t id = 1; id <= 5; ++id) heap.Alloc(id, 256);
  heap.Free(4);
  heap.Free(2);
  heap.Alloc(6, 256);
  heap.Alloc(7, 256);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(6), 256);
  EXPECT_EQ(layout.offsets.at(7), 768);
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(BestFitHeap, CoalescesAFreedBlockWithBothNeighbours) {
  // a..e = 256 each at 0, 256, 512, 768, 1024 (e keeps the top up). Free a and
  // c: two separate 256-byte gaps. Freeing b joins them with itself into one
  // [0,768) gap, so f=768 fits at 0 instead of going on top at 1280.
  BestFitHeap heap;
  for (int32_t id = 1; id <= 5; ++id) heap.Alloc(id, 256);
  heap.Free(1);
  heap.Free(3);
  heap.Free(2);
  heap.Alloc(6, 768);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(6), 0);
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(BestFitHeap, CoalescesWithTheGapAboveOrBelowAlone) {
  // a..e = 256 each at 0, 256, 512, 768, 1024. Free c, then b: b joins the gap
  // above it into [256,768), which f=512 fills exactly.
  BestFitHeap heap;
  for (int32_t id = 1; id <= 5; ++id) heap.Alloc(id, 256);
  heap.Free(3);
  heap.Free(2);
  heap.Alloc(6, 512);
  // Free d and a: gaps [0,256) and [768,1024), kept apart by f, so g=512 fits
  // neither and goes on top at 1280.
  heap.Free(4);
  heap.Free(1);
  heap.Alloc(7, 512);
  // Freeing f bridges the gap below, itself and the gap above into [0,1024).
  heap.Free(6);
  heap.Alloc(8, 1024);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(6), 256);
  EXPECT_EQ(layout.offsets.at(7), 1280);
  EXPECT_EQ(layout.offsets.at(8), 0);
  EXPECT_EQ(layout.arena_bytes, 1792);
}

TEST(BestFitHeap, GrowsIntoTheFreeSpaceAtTheTop) {
  // a=256 -> [0,256); b=256 -> [256,512); c=1024 -> [512,1536). Freeing b and
  // c frees everything above 256. d=2048 fits no gap, but it starts at 256 and
  // reuses that space: the arena grows to 2304, not 1536 + 2048 = 3584.
  BestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Alloc(2, 256);
  heap.Alloc(3, 1024);
  heap.Free(2);
  heap.Free(3);
  heap.Alloc(4, 2048);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(4), 256);
  EXPECT_EQ(layout.arena_bytes, 2304);
}

TEST(BestFitHeap, FreeingTheTopBlockAlsoReleasesTheGapBelowIt) {
  // a, b, c = 256 at 0, 256, 512. Free b (a gap below c), then c (the top): the
  // gap and c's block merge and the top drops to 256. d=1024 starts at 256.
  BestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Alloc(2, 256);
  heap.Alloc(3, 256);
  heap.Free(2);
  heap.Free(3);
  heap.Alloc(4, 1024);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(4), 256);
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(BestFitHeap, RoundsSizesUpToTheAlignment) {
  // Alignment 64: a=1 -> [0,64); b=65 -> [64,192); c=64 -> [192,256).
  BestFitHeap heap(64);
  heap.Alloc(1, 1);
  heap.Alloc(2, 65);
  heap.Alloc(3, 64);
  HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.offsets, ElementsAre(Pair(1, 0), Pair(2, 64), Pair(3, 192)));
  EXPECT_EQ(layout.arena_bytes, 256);

  // Alignment 1 packs bytes exactly.
  BestFitHeap packed(1);
  packed.Alloc(1, 3);
  packed.Alloc(2, 5);
  layout = packed.Finish();
  EXPECT_THAT(layout.offsets, ElementsAre(Pair(1, 0), Pair(2, 3)));
  EXPECT_EQ(layout.arena_bytes, 8);
}

TEST(BestFitHeap, RoundedSizeDecidesWhichGapFits) {
  // a=100 takes a whole 256-byte slot [0,256); b=256 -> [256,512). After
  // freeing a, c=200 (rounded to 256) fits its gap exactly.
  BestFitHeap heap;
  heap.Alloc(1, 100);
  heap.Alloc(2, 256);
  heap.Free(1);
  heap.Alloc(3, 200);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(3), 0);
  EXPECT_EQ(layout.arena_bytes, 512);
}

TEST(BestFitHeap, ZeroByteBuffersSitAtZeroAndNeverGrowTheArena) {
  // A zero-byte buffer overlaps nothing; it is placed at offset 0 and takes no
  // space, so the arena of a heap holding only it is empty, and the next real
  // buffer still starts at 0.
  BestFitHeap heap;
  heap.Alloc(1, 0);
  EXPECT_EQ(heap.Finish().arena_bytes, 0);
  heap.Alloc(2, 256);
  heap.Alloc(3, 256);
  heap.Free(2);
  // A zero-byte buffer allocated while a gap exists does not split or use it.
  heap.Alloc(4, 0);
  heap.Alloc(5, 256);
  heap.Free(1);
  heap.Free(4);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.offsets,
              ElementsAre(Pair(1, 0), Pair(2, 0), Pair(3, 256), Pair(4, 0), Pair(5, 0)));
  EXPECT_EQ(layout.arena_bytes, 512);
}

TEST(BestFitHeap, ArenaIsTheHighestTopEverReached) {
  // a=1024, b=1024 reach 2048. Freeing both drops the top back to 0, and c=256
  // goes at 0, but the arena must still hold the earlier peak.
  BestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Alloc(2, 1024);
  heap.Free(2);
  heap.Free(1);
  heap.Alloc(3, 256);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(3), 0);
  EXPECT_EQ(layout.arena_bytes, 2048);
}

TEST(BestFitHeap, FinishReportsLiveAndFreedBuffers) {
  // Buffers still live at the end (weights, say) are placed like any other.
  BestFitHeap heap;
  heap.Alloc(7, 512);
  heap.Alloc(3, 256);
  heap.Free(7);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.offsets, ElementsAre(Pair(3, 512), Pair(7, 0)));
  EXPECT_EQ(layout.arena_bytes, 768);
}

TEST(BestFitHeap, AnIdAllocatedAgainAfterFreeKeepsItsLatestPlacement) {
  // a=256 -> 0, b=256 -> 256; free a; a again with 512 fits no gap -> 512.
  BestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Alloc(2, 256);
  heap.Free(1);
  heap.Alloc(1, 512);
  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets.at(1), 512);
  EXPECT_EQ(layout.arena_bytes, 1024);
}

TEST(BestFitHeap, EmptyHeapHasAnEmptyLayout) {
  BestFitHeap heap;
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.offsets, IsEmpty());
  EXPECT_EQ(layout.arena_bytes, 0);
}

TEST(HeapCallRecorder, RecordsCallsWithoutAnInnerHeap) {
  HeapCallRecorder recorder;
  recorder.Alloc(3, 1000);
  recorder.Alloc(4, 0);
  recorder.Free(3);
  // Without an inner heap nothing checks the calls: freeing an unknown buffer
  // is recorded as asked.
  recorder.Free(9);
  EXPECT_THAT(recorder.calls(), ElementsAre("alloc 3 1000", "alloc 4 0", "free 3", "free 9"));
  const HeapLayout layout = recorder.Finish();
  EXPECT_THAT(layout.offsets, IsEmpty());
  EXPECT_EQ(layout.arena_bytes, 0);
}

TEST(HeapCallRecorder, ForwardsToTheInnerHeap) {
  // The recorder logs the requested sizes; the inner best-fit heap rounds them
  // (1000 -> 1024) and lays them out as in ReusesAFreedGap.
  HeapCallRecorder recorder(std::make_unique<BestFitHeap>());
  recorder.Alloc(1, 1000);
  recorder.Alloc(2, 2000);
  recorder.Free(1);
  recorder.Alloc(3, 512);
  EXPECT_THAT(recorder.calls(),
              ElementsAre("alloc 1 1000", "alloc 2 2000", "free 1", "alloc 3 512"));
  const HeapLayout layout = recorder.Finish();
  EXPECT_THAT(layout.offsets, ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 0)));
  EXPECT_EQ(layout.arena_bytes, 3072);
}

// An independent best fit for the property test: it keeps only the live
// blocks and derives the gaps from them at each allocation, so it shares no
// gap bookkeeping (splitting, coalescing, lowering the top) with BestFitHeap.
class ReferenceBestFit {
 public:
  explicit ReferenceBestFit(int64_t alignment) : alignment_(alignment) {}

  int64_t Alloc(int32_t buffer, int64_t bytes) {
    const int64_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
    if (rounded == 0) return 0;
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end), sorted
    for (const auto& [id, block] : live_) blocks.push_back(block);
    std::sort(blocks.begin(), blocks.end());
    int64_t best_offset = -1;
    int64_t best_size = 0;
    int64_t cursor = 0;
    for (const auto& [begin, end] : blocks) {
      const int64_t gap = begin - cursor;
      if (gap >= rounded && (best_offset < 0 || gap < best_size)) {
        best_offset = cursor;
        best_size = gap;
      }
      cursor = std::max(cursor, end);
    }
    // `cursor` is now the end of the highest live block: the top.
    const int64_t offset = best_offset >= 0 ? best_offset : cursor;
    live_[buffer] = {offset, offset + rounded};
    return offset;
  }

  void Free(int32_t buffer) { live_.erase(buffer); }

 private:
  int64_t alignment_;
  std::map<int32_t, std::pair<int64_t, int64_t>> live_;
};

TEST(BestFitHeap, RandomOperationsKeepLiveBuffersApartAndMatchAReference) {
  constexpr int64_t kAlignment = 256;
  constexpr int kOperations = 2000;
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int64_t> size_of(0, 5000);
  std::uniform_int_distribution<int> percent(0, 99);

  BestFitHeap heap(kAlignment);
  ReferenceBestFit reference(kAlignment);
  // Finish leaves the heap as it is, so the test reads it after every step;
  // `live` is the test's own record of what should be live where.
  std::map<int32_t, std::pair<int64_t, int64_t>> live;  // id -> offset, rounded bytes
  std::map<int32_t, int64_t> last_offset;               // every id ever placed
  int32_t next_id = 0;
  int64_t live_bytes = 0;
  int64_t peak_live_bytes = 0;
  int64_t highest_end = 0;

  for (int op = 0; op < kOperations; ++op) {
    // Allocations slightly outnumber frees so the heap both grows and churns.
    const bool alloc = live.empty() || percent(rng) < 55;
    if (alloc) {
      // Ids are mostly fresh, sometimes ones freed earlier, to cover reuse.
      int32_t id = next_id;
      if (next_id > 0 && percent(rng) < 20) {
        const int32_t old = std::uniform_int_distribution<int32_t>(0, next_id - 1)(rng);
        if (!live.contains(old)) id = old;
      }
      if (id == next_id) ++next_id;
      // About one in twenty is a zero-byte buffer.
      const int64_t bytes = size_of(rng) < 250 ? 0 : size_of(rng);
      const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      heap.Alloc(id, bytes);
      const int64_t expected = reference.Alloc(id, bytes);
      const int64_t offset = heap.Finish().offsets.at(id);
      ASSERT_EQ(offset, expected) << "operation " << op << ": alloc " << id << " " << bytes;
      live[id] = {offset, rounded};
      last_offset[id] = offset;
      live_bytes += rounded;
      peak_live_bytes = std::max(peak_live_bytes, live_bytes);
      highest_end = std::max(highest_end, offset + rounded);
    } else {
      auto victim = live.begin();
      std::advance(victim, std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      heap.Free(victim->first);
      reference.Free(victim->first);
      live_bytes -= victim->second.second;
      live.erase(victim);
    }

    const HeapLayout layout = heap.Finish();
    ASSERT_GE(layout.arena_bytes, peak_live_bytes) << "operation " << op;
    ASSERT_EQ(layout.arena_bytes, highest_end) << "operation " << op;
    std::vector<std::pair<int64_t, int64_t>> intervals;
    for (const auto& [id, block] : live) {
      const auto [offset, rounded] = block;
      ASSERT_EQ(offset % kAlignment, 0) << "buffer " << id;
      ASSERT_GE(offset, 0) << "buffer " << id;
      ASSERT_LE(offset + rounded, layout.arena_bytes) << "buffer " << id;
      if (rounded > 0) intervals.emplace_back(offset, offset + rounded);
    }
    std::sort(intervals.begin(), intervals.end());
    for (size_t i = 1; i < intervals.size(); ++i) {
      ASSERT_LE(intervals[i - 1].second, intervals[i].first)
          << "operation " << op << ": live buffers overlap";
    }
  }

  const HeapLayout layout = heap.Finish();
  EXPECT_EQ(layout.offsets, last_offset);
  EXPECT_GT(peak_live_bytes, 0);
}

TEST(BestFitHeapDeathTest, AllocatingALiveBufferAgain) {
  BestFitHeap heap;
  heap.Alloc(1, 256);
  EXPECT_DEATH(heap.Alloc(1, 256), "allocated twice");
}

TEST(BestFitHeapDeathTest, FreeingABufferNeverAllocated) {
  BestFitHeap heap;
  EXPECT_DEATH(heap.Free(1), "not live");
}

TEST(BestFitHeapDeathTest, FreeingABufferTwice) {
  BestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Free(1);
  EXPECT_DEATH(heap.Free(1), "not live");
}

TEST(BestFitHeapDeathTest, NegativeSize) {
  BestFitHeap heap;
  EXPECT_DEATH(heap.Alloc(1, -1), "negative size");
}

TEST(BestFitHeapDeathTest, NonPositiveAlignment) {
  EXPECT_DEATH(BestFitHeap(0), "alignment must be positive");
}

TEST(HeapCallRecorderDeathTest, InnerHeapStillChecksTheCalls) {
  HeapCallRecorder recorder(std::make_unique<BestFitHeap>());
  EXPECT_DEATH(recorder.Free(1), "not live");
}

}  // namespace
}  // namespace spillway::program
