#include "program/memory_layout.h"

#include <absl/container/btree_map.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
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
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 0)));
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
  EXPECT_EQ(layout.Offsets().at(5), 1280);
  EXPECT_EQ(layout.Offsets().at(6), 0);
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
  EXPECT_EQ(layout.Offsets().at(4), 768);
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
  EXPECT_EQ(layout.Offsets().at(6), 256);
  EXPECT_EQ(layout.Offsets().at(7), 768);
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
  EXPECT_EQ(layout.Offsets().at(6), 0);
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
  EXPECT_EQ(layout.Offsets().at(6), 256);
  EXPECT_EQ(layout.Offsets().at(7), 1280);
  EXPECT_EQ(layout.Offsets().at(8), 0);
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
  EXPECT_EQ(layout.Offsets().at(4), 256);
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
  EXPECT_EQ(layout.Offsets().at(4), 256);
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(BestFitHeap, RoundsSizesUpToTheAlignment) {
  // Alignment 64: a=1 -> [0,64); b=65 -> [64,192); c=64 -> [192,256).
  BestFitHeap heap(64);
  heap.Alloc(1, 1);
  heap.Alloc(2, 65);
  heap.Alloc(3, 64);
  HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 64), Pair(3, 192)));
  EXPECT_EQ(layout.arena_bytes, 256);

  // Alignment 1 packs bytes exactly.
  BestFitHeap packed(1);
  packed.Alloc(1, 3);
  packed.Alloc(2, 5);
  layout = packed.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 3)));
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
  EXPECT_EQ(layout.Offsets().at(3), 0);
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
  EXPECT_THAT(layout.Offsets(),
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
  EXPECT_EQ(layout.Offsets().at(3), 0);
  EXPECT_EQ(layout.arena_bytes, 2048);
}

TEST(BestFitHeap, FinishReportsLiveAndFreedBuffers) {
  // Buffers still live at the end (weights, say) are placed like any other.
  BestFitHeap heap;
  heap.Alloc(7, 512);
  heap.Alloc(3, 256);
  heap.Free(7);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(3, 512), Pair(7, 0)));
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
  EXPECT_EQ(layout.Offsets().at(1), 512);
  EXPECT_EQ(layout.arena_bytes, 1024);
}

TEST(BestFitHeap, EmptyHeapHasAnEmptyLayout) {
  BestFitHeap heap;
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), IsEmpty());
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
  EXPECT_THAT(layout.Offsets(), IsEmpty());
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
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 0)));
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
  absl::btree_map<int32_t, int64_t> last_offset;        // every id ever placed
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
      const int64_t offset = heap.Finish().Offsets().at(id);
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
  EXPECT_EQ(layout.Offsets(), last_offset);
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

// ---------------------------------------------------------------------------
// DecreasingSizeBestFitHeap. Every Alloc and Free takes the next clock tick,
// starting at 0; the comments write a buffer's life as [alloc tick, free tick)
// and "inf" for one never freed. Placement goes by decreasing rounded size,
// ties to the earlier Alloc.

TEST(DecreasingSizeBestFitHeap, PlacesLargeBuffersFirstAndBeatsOnlineBestFit) {
  // t0 alloc 1 (256), t1 alloc 2 (256), t2 free 1, t3 alloc 3 (512):
  // 1 is [0,2), 2 is [1,inf), 3 is [3,inf).
  auto replay = [](HeapAlgorithm& heap) {
    heap.Alloc(1, 256);
    heap.Alloc(2, 256);
    heap.Free(1);
    heap.Alloc(3, 512);
    return heap.Finish();
  };
  // Online best fit puts 1 at 0 and 2 at 256; the 256-byte hole that freeing 1
  // leaves cannot hold 3, which goes on top at 512: arena 1024.
  BestFitHeap online;
  const HeapLayout online_layout = replay(online);
  EXPECT_THAT(online_layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 256), Pair(3, 512)));
  EXPECT_EQ(online_layout.arena_bytes, 1024);
  // Largest first: 3 at 0. Then 1 (earlier of the 256s), which does not
  // overlap 3 in time, also at 0. Then 2, which overlaps both: on top of them,
  // at 512. Arena 768.
  DecreasingSizeBestFitHeap global;
  const HeapLayout global_layout = replay(global);
  EXPECT_THAT(global_layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 512), Pair(3, 0)));
  EXPECT_EQ(global_layout.arena_bytes, 768);
}

TEST(DecreasingSizeBestFitHeap, PicksTheSmallestGapThatFits) {
  // t0 alloc 1 (1024), t1 alloc 2 (512), t2 alloc 3 (512), t3 alloc 4 (512),
  // t4 free 1, t5 free 3, t6 alloc 5 (512):
  // 1 [0,4), 2 [1,inf), 3 [2,5), 4 [3,inf), 5 [6,inf).
  // 1 -> [0,1024). 2 overlaps 1 -> [1024,1536). 3 overlaps 1, 2 ->
  // [1536,2048). 4 overlaps 1, 2, 3 -> [2048,2560). 5 overlaps only 2 and 4,
  // which leave gaps [0,1024) and [1536,2048): the smaller one wins although
  // the larger one is lower.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Alloc(2, 512);
  heap.Alloc(3, 512);
  heap.Alloc(4, 512);
  heap.Free(1);
  heap.Free(3);
  heap.Alloc(5, 512);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(),
              ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 1536), Pair(4, 2048), Pair(5, 1536)));
  EXPECT_EQ(layout.arena_bytes, 2560);
}

TEST(DecreasingSizeBestFitHeap, EqualGapsGoToTheLowestOffset) {
  // As above with 1 only 512 bytes: 1 -> 0, 2 -> 512, 3 -> 1024, 4 -> 1536.
  // 5 overlaps 2 and 4, which leave two 512-byte gaps, at 0 and 1024: it takes 0.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 512);
  heap.Alloc(2, 512);
  heap.Alloc(3, 512);
  heap.Alloc(4, 512);
  heap.Free(1);
  heap.Free(3);
  heap.Alloc(5, 512);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(),
              ElementsAre(Pair(1, 0), Pair(2, 512), Pair(3, 1024), Pair(4, 1536), Pair(5, 0)));
  EXPECT_EQ(layout.arena_bytes, 2048);
}

TEST(DecreasingSizeBestFitHeap, GoesOnTopOfTheOverlappingBuffersBelowTheArenaTop) {
  // t0 alloc 1 (1024), t1 free 1, t2 alloc 2 (512), t3 alloc 3 (256):
  // 1 [0,1), 2 [2,inf), 3 [3,inf). 1 -> 0; 2 overlaps nothing placed -> 0; 3
  // overlaps only 2 and goes on top of it, at 512, well below the arena's
  // top of 1024 (and not at 1024).
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Free(1);
  heap.Alloc(2, 512);
  heap.Alloc(3, 256);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 0), Pair(3, 512)));
  EXPECT_EQ(layout.arena_bytes, 1024);
}

TEST(DecreasingSizeBestFitHeap, SkipsGapsThatAreTooSmall) {
  // t0 alloc 2 (1024), t1 alloc 3 (1024), t2 alloc 4 (512), t3 free 2,
  // t4 free 4, t5 alloc 1 (1280):
  // 2 [0,3), 3 [1,inf), 4 [2,4), 1 [5,inf).
  // 1 (largest) -> [0,1280). 2 does not overlap 1 -> [0,1024). 3 overlaps 1
  // and 2 -> on top at 1280. 4 overlaps 2 and 3 but not 1: they leave the gap
  // [1024,1280), too small for 512, so 4 goes on top of 3, at 2304.
  // Online best fit ends at 3328 here (1 cannot use the 1024-byte hole 2
  // leaves and goes on top at 2048).
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(2, 1024);
  heap.Alloc(3, 1024);
  heap.Alloc(4, 512);
  heap.Free(2);
  heap.Free(4);
  heap.Alloc(1, 1280);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 0), Pair(3, 1280), Pair(4, 2304)));
  EXPECT_EQ(layout.arena_bytes, 2816);
}

TEST(DecreasingSizeBestFitHeap, AFreeBeforeAnAllocLetsThemShareBytes) {
  // t0 alloc 1, t1 free 1, t2 alloc 2: 1 is [0,1) and 2 is [2,inf). 1's free
  // is an earlier call than 2's alloc, so they share offset 0.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Free(1);
  heap.Alloc(2, 1024);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 0)));
  EXPECT_EQ(layout.arena_bytes, 1024);
}

TEST(DecreasingSizeBestFitHeap, AnAllocBeforeAFreeKeepsThemApart) {
  // t0 alloc 1, t1 alloc 2, t2 free 1: 1 is [0,2) and 2 is [1,inf). Both are
  // live at tick 1, as 2 is allocated by the call just before 1's free, so
  // they may not share bytes.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 1024);
  heap.Alloc(2, 1024);
  heap.Free(1);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 1024)));
  EXPECT_EQ(layout.arena_bytes, 2048);
}

TEST(DecreasingSizeBestFitHeap, ABufferFreedRightAfterItsAllocIsStillLiveForOneTick) {
  // t0 alloc 2 (256), t1 alloc 1 (1024), t2 free 1, t3 alloc 3 (1024):
  // 2 [0,inf), 1 [1,2), 3 [3,inf). 1 lives only at tick 1 but overlaps 2
  // there; 3 starts after 1's free. 1 -> 0; 3 does not overlap 1 -> 0; 2
  // overlaps both and goes on top at 1024.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(2, 256);
  heap.Alloc(1, 1024);
  heap.Free(1);
  heap.Alloc(3, 1024);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 1024), Pair(3, 0)));
  EXPECT_EQ(layout.arena_bytes, 1280);
}

TEST(DecreasingSizeBestFitHeap, BuffersNeverFreedAreLiveToTheEnd) {
  // t0 alloc 1 (256, never freed), t1 alloc 2 (256), t2 free 2, t3 alloc 3
  // (256): 1 [0,inf) overlaps 2 [1,3) and 3 [3,inf); 2 and 3 do not overlap.
  // 1 -> 0, 2 -> 256, 3 -> 256.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Alloc(2, 256);
  heap.Free(2);
  heap.Alloc(3, 256);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 256), Pair(3, 256)));
  EXPECT_EQ(layout.arena_bytes, 512);
}

TEST(DecreasingSizeBestFitHeap, FinishCanBeCalledAgainAfterMoreCalls) {
  // After t0 alloc 1 (512) the layout is 1 -> 0. Then t1 alloc 2 (1024), and
  // 1, still live, overlaps it: 2 (larger) -> 0, 1 -> 1024.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 512);
  HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0)));
  EXPECT_EQ(layout.arena_bytes, 512);
  heap.Alloc(2, 1024);
  layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 1024), Pair(2, 0)));
  EXPECT_EQ(layout.arena_bytes, 1536);
}

TEST(DecreasingSizeBestFitHeap, RoundsSizesUpToTheAlignment) {
  // Alignment 64, all live together: b=65 rounds to 128 and goes first, at 0;
  // then a=1 and c=64 (64 each, a allocated first) at 128 and 192.
  DecreasingSizeBestFitHeap heap(64);
  heap.Alloc(1, 1);
  heap.Alloc(2, 65);
  heap.Alloc(3, 64);
  HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 128), Pair(2, 0), Pair(3, 192)));
  EXPECT_EQ(layout.arena_bytes, 256);

  // Alignment 1 packs bytes exactly: 5 first at 0, then 3 at 5.
  DecreasingSizeBestFitHeap packed(1);
  packed.Alloc(1, 3);
  packed.Alloc(2, 5);
  layout = packed.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 5), Pair(2, 0)));
  EXPECT_EQ(layout.arena_bytes, 8);
}

TEST(DecreasingSizeBestFitHeap, EqualSizesGoInAllocOrderNotIdOrder) {
  // Three live-together 256-byte buffers allocated as 9, 4, 7 are stacked in
  // that order: 9 -> 0, 4 -> 256, 7 -> 512.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(9, 256);
  heap.Alloc(4, 200);
  heap.Alloc(7, 1);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(4, 256), Pair(7, 512), Pair(9, 0)));
  EXPECT_EQ(layout.arena_bytes, 768);
}

TEST(DecreasingSizeBestFitHeap, ZeroByteBuffersSitAtZeroAndNeverGrowTheArena) {
  // Only a zero-byte buffer: empty arena.
  DecreasingSizeBestFitHeap alone;
  alone.Alloc(1, 0);
  HeapLayout layout = alone.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0)));
  EXPECT_EQ(layout.arena_bytes, 0);

  // t0 alloc 1 (0), t1 alloc 2 (256), t2 alloc 3 (256), t3 free 2, t4 alloc 4
  // (0), t5 alloc 5 (256), t6 free 1, t7 free 4: 2 [1,3), 3 [2,inf),
  // 5 [5,inf). 2 -> 0, 3 -> 256, 5 -> the gap [0,256) below 3. The zero-byte
  // buffers take ticks but no space and split no gap.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 0);
  heap.Alloc(2, 256);
  heap.Alloc(3, 256);
  heap.Free(2);
  heap.Alloc(4, 0);
  heap.Alloc(5, 256);
  heap.Free(1);
  heap.Free(4);
  layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(),
              ElementsAre(Pair(1, 0), Pair(2, 0), Pair(3, 256), Pair(4, 0), Pair(5, 0)));
  EXPECT_EQ(layout.arena_bytes, 512);
}

TEST(DecreasingSizeBestFitHeap, AnIdAllocatedAgainReportsItsLatestAlloc) {
  // t0 alloc 2 (1024), t1 alloc 1 (256), t2 free 1, t3 free 2, t4 alloc 1
  // (2048): 2 [0,3), first 1 [1,2), second 1 [4,inf). The second 1 is the
  // largest and is placed first, at 0; 2 does not overlap it -> 0; the first 1
  // overlaps 2 -> 1024, and is placed last. Id 1 reports its latest Alloc (0),
  // not its last placement; the first 1 still counted for the layout.
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(2, 1024);
  heap.Alloc(1, 256);
  heap.Free(1);
  heap.Free(2);
  heap.Alloc(1, 2048);
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), ElementsAre(Pair(1, 0), Pair(2, 0)));
  EXPECT_EQ(layout.arena_bytes, 2048);

  // t0 alloc 1 (256), t1 free 1, t2 alloc 2 (1024), t3 alloc 1 (256): the
  // second 1 overlaps 2 and sits on top of it at 1024.
  DecreasingSizeBestFitHeap again;
  again.Alloc(1, 256);
  again.Free(1);
  again.Alloc(2, 1024);
  again.Alloc(1, 256);
  const HeapLayout again_layout = again.Finish();
  EXPECT_THAT(again_layout.Offsets(), ElementsAre(Pair(1, 1024), Pair(2, 0)));
  EXPECT_EQ(again_layout.arena_bytes, 1280);
}

TEST(DecreasingSizeBestFitHeap, EmptyHeapHasAnEmptyLayout) {
  DecreasingSizeBestFitHeap heap;
  const HeapLayout layout = heap.Finish();
  EXPECT_THAT(layout.Offsets(), IsEmpty());
  EXPECT_EQ(layout.arena_bytes, 0);
}

TEST(DecreasingSizeBestFitHeap, WorksBehindTheRecorder) {
  HeapCallRecorder recorder(std::make_unique<DecreasingSizeBestFitHeap>());
  recorder.Alloc(1, 256);
  recorder.Alloc(2, 256);
  recorder.Free(1);
  recorder.Alloc(3, 512);
  EXPECT_THAT(recorder.calls(), ElementsAre("alloc 1 256", "alloc 2 256", "free 1", "alloc 3 512"));
  EXPECT_EQ(recorder.Finish().arena_bytes, 768);
}

// One buffer's life, as the tests below record it.
struct Lifetime {
  int32_t buffer = 0;
  int64_t rounded = 0;
  int64_t start = 0;                                  // alloc tick
  int64_t end = std::numeric_limits<int64_t>::max();  // free tick
};

bool OverlapInTime(const Lifetime& a, const Lifetime& b) {
  return a.start < b.end && b.start < a.end;
}

// An independent global decreasing-size best fit: it compares every pair of
// buffers (no interval tree) and finds gaps differently, trying every block
// end (and 0) as a candidate offset. Returns an offset per lifetime.
std::vector<int64_t> ReferenceDecreasingSizeBestFit(const std::vector<Lifetime>& lives) {
  std::vector<size_t> order;
  for (size_t i = 0; i < lives.size(); ++i) {
    if (lives[i].rounded > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (lives[a].rounded != lives[b].rounded) return lives[a].rounded > lives[b].rounded;
    return lives[a].start < lives[b].start;
  });
  std::vector<int64_t> offsets(lives.size(), 0);
  std::vector<size_t> placed;
  for (const size_t i : order) {
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (const size_t j : placed) {
      if (OverlapInTime(lives[i], lives[j])) {
        blocks.emplace_back(offsets[j], offsets[j] + lives[j].rounded);
      }
    }
    std::vector<int64_t> candidates = {0};
    int64_t top = 0;
    for (const auto& [begin, end] : blocks) {
      candidates.push_back(end);
      top = std::max(top, end);
    }
    int64_t best = -1;
    int64_t best_gap = 0;
    for (const int64_t at : candidates) {
      bool covered = false;
      int64_t next_begin = std::numeric_limits<int64_t>::max();
      for (const auto& [begin, end] : blocks) {
        if (begin <= at && at < end) covered = true;
        if (begin >= at) next_begin = std::min(next_begin, begin);
      }
      // A candidate with no block above it is the top, not a gap.
      if (covered || next_begin == std::numeric_limits<int64_t>::max()) continue;
      const int64_t gap = next_begin - at;
      if (gap < lives[i].rounded) continue;
      if (best < 0 || gap < best_gap || (gap == best_gap && at < best)) {
        best = at;
        best_gap = gap;
      }
    }
    offsets[i] = best >= 0 ? best : top;
    placed.push_back(i);
  }
  return offsets;
}

// Checks that buffers overlapping in time do not overlap in bytes, by
// sweeping the ticks with the set of live blocks: every two buffers that
// overlap in time are live together when the later one is allocated.
void ExpectNoConflicts(const std::vector<Lifetime>& lives, const std::vector<int64_t>& offsets,
                       int64_t alignment, int64_t arena_bytes) {
  struct Event {
    int64_t tick;
    bool alloc;
    size_t index;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < lives.size(); ++i) {
    ASSERT_EQ(offsets[i] % alignment, 0) << "buffer " << lives[i].buffer;
    ASSERT_GE(offsets[i], 0) << "buffer " << lives[i].buffer;
    ASSERT_LE(offsets[i] + lives[i].rounded, arena_bytes) << "buffer " << lives[i].buffer;
    if (lives[i].rounded == 0) {
      ASSERT_EQ(offsets[i], 0) << "buffer " << lives[i].buffer;
      continue;
    }
    events.push_back({lives[i].start, true, i});
    if (lives[i].end != std::numeric_limits<int64_t>::max()) {
      events.push_back({lives[i].end, false, i});
    }
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.tick < b.tick; });
  std::map<int64_t, size_t> live;  // offset -> index
  for (const Event& event : events) {
    const int64_t offset = offsets[event.index];
    if (!event.alloc) {
      live.erase(offset);
      continue;
    }
    const auto next = live.lower_bound(offset);
    if (next != live.end()) {
      ASSERT_GE(next->first, offset + lives[event.index].rounded)
          << "buffers " << lives[event.index].buffer << " and " << lives[next->second].buffer;
    }
    if (next != live.begin()) {
      const auto below = std::prev(next);
      ASSERT_LE(below->first + lives[below->second].rounded, offset)
          << "buffers " << lives[below->second].buffer << " and " << lives[event.index].buffer;
    }
    live.emplace(offset, event.index);
  }
}

// The most bytes live at once, from the lifetimes.
int64_t PeakLiveBytes(const std::vector<Lifetime>& lives) {
  std::map<int64_t, int64_t> delta;  // tick -> change
  for (const Lifetime& life : lives) {
    delta[life.start] += life.rounded;
    if (life.end != std::numeric_limits<int64_t>::max()) delta[life.end] -= life.rounded;
  }
  int64_t live = 0;
  int64_t peak = 0;
  for (const auto& [tick, change] : delta) {
    live += change;
    peak = std::max(peak, live);
  }
  return peak;
}

struct RandomRun {
  std::vector<Lifetime> lives;  // in alloc order
  int64_t tick = 0;
};

// Random Alloc/Free calls on `heap`, recorded as lifetimes. With `reuse_ids`
// some allocations take an id freed earlier.
RandomRun RandomCalls(HeapAlgorithm& heap, uint32_t seed, int operations, int64_t alignment,
                      bool reuse_ids) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> size_of(0, 5000);
  std::uniform_int_distribution<int> percent(0, 99);
  RandomRun run;
  std::map<int32_t, size_t> live;  // id -> index in run.lives
  int32_t next_id = 0;
  for (int op = 0; op < operations; ++op) {
    if (live.empty() || percent(rng) < 55) {
      int32_t id = next_id;
      if (reuse_ids && next_id > 0 && percent(rng) < 20) {
        const int32_t old = std::uniform_int_distribution<int32_t>(0, next_id - 1)(rng);
        if (!live.contains(old)) id = old;
      }
      if (id == next_id) ++next_id;
      const int64_t bytes = size_of(rng) < 250 ? 0 : size_of(rng);
      heap.Alloc(id, bytes);
      live[id] = run.lives.size();
      run.lives.push_back(Lifetime{.buffer = id,
                                   .rounded = (bytes + alignment - 1) / alignment * alignment,
                                   .start = run.tick++});
    } else {
      auto victim = live.begin();
      std::advance(victim, std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      heap.Free(victim->first);
      run.lives[victim->second].end = run.tick++;
      live.erase(victim);
    }
  }
  return run;
}

TEST(DecreasingSizeBestFitHeap, RandomCallsKeepOverlappingBuffersApartAndMatchAReference) {
  for (const int64_t alignment : {int64_t{1}, int64_t{256}}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(testing::Message() << "alignment " << alignment << ", seed " << seed);
      // Fresh ids, so every lifetime appears in the layout.
      DecreasingSizeBestFitHeap heap(alignment);
      const RandomRun run = RandomCalls(heap, seed, 1500, alignment, /*reuse_ids=*/false);
      const HeapLayout layout = heap.Finish();
      const auto by_buffer = layout.Offsets();
      ASSERT_EQ(by_buffer.size(), run.lives.size());
      std::vector<int64_t> offsets;
      int64_t highest_end = 0;
      for (const Lifetime& life : run.lives) {
        offsets.push_back(by_buffer.at(life.buffer));
        highest_end = std::max(highest_end, offsets.back() + life.rounded);
      }
      ExpectNoConflicts(run.lives, offsets, alignment, layout.arena_bytes);
      EXPECT_EQ(layout.arena_bytes, highest_end);
      EXPECT_GE(layout.arena_bytes, PeakLiveBytes(run.lives));
      EXPECT_GT(PeakLiveBytes(run.lives), 0);
      EXPECT_EQ(offsets, ReferenceDecreasingSizeBestFit(run.lives));
    }
  }
}

TEST(DecreasingSizeBestFitHeap, RandomCallsWithReusedIdsMatchAReference) {
  for (uint32_t seed = 11; seed <= 14; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    DecreasingSizeBestFitHeap heap;
    const RandomRun run = RandomCalls(heap, seed, 1500, 256, /*reuse_ids=*/true);
    ASSERT_LT(heap.Finish().Offsets().size(), run.lives.size()) << "no id was reused";
    // The reference places every lifetime; the heap reports each id's latest.
    const std::vector<int64_t> offsets = ReferenceDecreasingSizeBestFit(run.lives);
    int64_t highest_end = 0;
    absl::btree_map<int32_t, int64_t> latest;
    for (size_t i = 0; i < run.lives.size(); ++i) {
      latest[run.lives[i].buffer] = offsets[i];
      highest_end = std::max(highest_end, offsets[i] + run.lives[i].rounded);
    }
    ExpectNoConflicts(run.lives, offsets, 256, highest_end);
    const HeapLayout layout = heap.Finish();
    EXPECT_EQ(layout.Offsets(), latest);
    EXPECT_EQ(layout.arena_bytes, highest_end);
    EXPECT_GE(layout.arena_bytes, PeakLiveBytes(run.lives));
  }
}

// A training step's shape: parameters and optimizer state allocated first
// and never freed (each overlaps every buffer placed before it, which the
// layout answers from the union of all it has placed), a few buffers freed
// among them (after which that no longer holds), then activations that come
// and go and gradients kept to the end.
TEST(DecreasingSizeBestFitHeap, BuffersLiveFromTheStartToTheEndMatchAReference) {
  for (uint32_t seed = 31; seed <= 36; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> size_of(1, 8000);
    std::uniform_int_distribution<int> percent(0, 99);
    DecreasingSizeBestFitHeap heap;
    std::vector<Lifetime> lives;
    std::vector<size_t> live;  // indices into lives
    int64_t tick = 0;
    auto alloc = [&](int64_t bytes) {
      const auto id = static_cast<int32_t>(lives.size());
      heap.Alloc(id, bytes);
      lives.push_back(
          Lifetime{.buffer = id, .rounded = (bytes + 255) / 256 * 256, .start = tick++});
      return lives.size() - 1;
    };
    auto free_one = [&] {
      const size_t at = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      heap.Free(lives[live[at]].buffer);
      lives[live[at]].end = tick++;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    };
    // The prologue: with seeds past 33, a few of its buffers are freed in it.
    for (int i = 0; i < 300; ++i) {
      const size_t index = alloc(size_of(rng));
      if (seed > 33 && percent(rng) < 5) live.push_back(index);
      if (seed > 33 && !live.empty() && percent(rng) < 3) free_one();
    }
    // The step: activations come and go; one buffer in ten is a gradient,
    // never freed.
    for (int i = 0; i < 1200; ++i) {
      if (live.empty() || percent(rng) < 55) {
        const size_t index = alloc(size_of(rng) / 2);
        if (percent(rng) >= 10) live.push_back(index);
      } else {
        free_one();
      }
    }
    const HeapLayout layout = heap.Finish();
    const auto by_buffer = layout.Offsets();
    std::vector<int64_t> offsets;
    for (const Lifetime& life : lives) offsets.push_back(by_buffer.at(life.buffer));
    ExpectNoConflicts(lives, offsets, 256, layout.arena_bytes);
    EXPECT_EQ(offsets, ReferenceDecreasingSizeBestFit(lives));
  }
}

// A heap made with `give_up_above` (by `make_heap(limit)`), fed the same
// random calls as one without a limit: at or above the unlimited arena it
// lays out the very same placements; below it, it gives up with an arena
// past the limit and no more than the unlimited one, and no placements. An
// `online` heap knows it has given up at the Alloc that passes the limit
// (gave_up); the others only at Finish.
template <typename Heap, typename MakeHeap>
void ExpectGivesUpOnlyPastItsLimit(MakeHeap make_heap, bool reuse_ids, bool online) {
  for (uint32_t seed = 21; seed <= 24; ++seed) {
    Heap unlimited = make_heap(std::numeric_limits<int64_t>::max());
    RandomCalls(unlimited, seed, 1500, 256, reuse_ids);
    const HeapLayout full = unlimited.Finish();
    ASSERT_TRUE(full.complete);
    ASSERT_FALSE(unlimited.gave_up());
    ASSERT_GT(full.arena_bytes, 256);
    for (const int64_t limit : {full.arena_bytes + 1, full.arena_bytes, full.arena_bytes - 1,
                                full.arena_bytes / 2, int64_t{0}}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << ", limit " << limit);
      // The same calls, with a limit; an online heap ignores those after it
      // gives up.
      Heap limited = make_heap(limit);
      RandomCalls(limited, seed, 1500, 256, reuse_ids);
      const HeapLayout layout = limited.Finish();
      if (limit >= full.arena_bytes) {
        EXPECT_FALSE(limited.gave_up());
        EXPECT_TRUE(layout.complete);
        EXPECT_EQ(layout.placements, full.placements);
        EXPECT_EQ(layout.arena_bytes, full.arena_bytes);
      } else {
        // What the arena had reached at the buffer that passed the limit.
        EXPECT_EQ(limited.gave_up(), online);
        EXPECT_FALSE(layout.complete);
        EXPECT_TRUE(layout.placements.empty());
        EXPECT_GT(layout.arena_bytes, limit);
        EXPECT_LE(layout.arena_bytes, full.arena_bytes);
      }
    }
  }
}

TEST(DecreasingSizeBestFitHeap, GivesUpOnlyOnceTheArenaPassesItsLimit) {
  // It places every buffer at Finish, so it only knows then.
  ExpectGivesUpOnlyPastItsLimit<DecreasingSizeBestFitHeap>(
      [](int64_t limit) { return DecreasingSizeBestFitHeap(256, limit); }, /*reuse_ids=*/false,
      /*online=*/false);
}

TEST(BestFitHeap, GivesUpOnlyOnceTheArenaPassesItsLimit) {
  ExpectGivesUpOnlyPastItsLimit<BestFitHeap>([](int64_t limit) { return BestFitHeap(256, limit); },
                                             /*reuse_ids=*/true, /*online=*/true);
}

TEST(DecreasingSizeBestFitHeap, TenThousandBuffersFinish) {
  // A program-like sequence of 10,000 buffers: 200 weights live throughout,
  // 1,800 forward activations freed in reverse order by the backward pass, and
  // 8,000 short-lived temporaries (a few calls each), some of size zero.
  // Correctness only; the time is not checked.
  constexpr int64_t kAlignment = 256;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> weight_size(1 << 16, 1 << 22);
  std::uniform_int_distribution<int64_t> activation_size(1 << 12, 1 << 20);
  std::uniform_int_distribution<int64_t> temp_size(0, 1 << 18);
  std::uniform_int_distribution<int> temp_life(1, 8);

  DecreasingSizeBestFitHeap heap(kAlignment);
  std::vector<Lifetime> lives;
  int64_t tick = 0;
  int32_t next_id = 0;
  // Temporaries still live: (calls left, index in `lives`).
  std::vector<std::pair<int, size_t>> temps;
  auto alloc = [&](int64_t bytes) {
    heap.Alloc(next_id, bytes);
    lives.push_back(Lifetime{.buffer = next_id++,
                             .rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment,
                             .start = tick++});
    return lives.size() - 1;
  };
  auto free = [&](size_t index) {
    heap.Free(lives[index].buffer);
    lives[index].end = tick++;
  };
  auto step = [&](int64_t bytes) {
    // One op: a temporary or two, and the expired ones freed.
    for (int k = 0; k < 2; ++k) temps.emplace_back(temp_life(rng), alloc(temp_size(rng)));
    for (auto it = temps.begin(); it != temps.end();) {
      if (--it->first == 0) {
        free(it->second);
        it = temps.erase(it);
      } else {
        ++it;
      }
    }
    return bytes > 0 ? alloc(bytes) : size_t{0};
  };
  for (int i = 0; i < 200; ++i) alloc(weight_size(rng));
  std::vector<size_t> activations;
  for (int i = 0; i < 1800; ++i) activations.push_back(step(activation_size(rng)));
  while (!activations.empty()) {
    step(0);
    free(activations.back());
    activations.pop_back();
  }
  while (next_id < 10000) step(0);
  for (const auto& [left, index] : temps) free(index);
  ASSERT_EQ(lives.size(), 10000u);

  const HeapLayout layout = heap.Finish();
  const auto by_buffer = layout.Offsets();
  ASSERT_EQ(by_buffer.size(), lives.size());
  std::vector<int64_t> offsets;
  for (const Lifetime& life : lives) offsets.push_back(by_buffer.at(life.buffer));
  ExpectNoConflicts(lives, offsets, kAlignment, layout.arena_bytes);
  EXPECT_GE(layout.arena_bytes, PeakLiveBytes(lives));
}

TEST(DecreasingSizeBestFitHeapDeathTest, AllocatingALiveBufferAgain) {
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 256);
  EXPECT_DEATH(heap.Alloc(1, 512), "allocated twice");
}

TEST(DecreasingSizeBestFitHeapDeathTest, AllocatingALiveZeroByteBufferAgain) {
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 0);
  EXPECT_DEATH(heap.Alloc(1, 0), "allocated twice");
}

TEST(DecreasingSizeBestFitHeapDeathTest, FreeingABufferNeverAllocated) {
  DecreasingSizeBestFitHeap heap;
  EXPECT_DEATH(heap.Free(1), "not live");
}

TEST(DecreasingSizeBestFitHeapDeathTest, FreeingABufferTwice) {
  DecreasingSizeBestFitHeap heap;
  heap.Alloc(1, 256);
  heap.Free(1);
  EXPECT_DEATH(heap.Free(1), "not live");
}

TEST(DecreasingSizeBestFitHeapDeathTest, NegativeSize) {
  DecreasingSizeBestFitHeap heap;
  EXPECT_DEATH(heap.Alloc(1, -1), "negative size");
}

TEST(DecreasingSizeBestFitHeapDeathTest, NonPositiveAlignment) {
  EXPECT_DEATH(DecreasingSizeBestFitHeap(0), "alignment must be positive");
  EXPECT_DEATH(DecreasingSizeBestFitHeap(-256), "alignment must be positive");
}

}  // namespace
}  // namespace spillway::program
