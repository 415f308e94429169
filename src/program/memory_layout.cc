#include "program/memory_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <limits>
#include <span>

#include "support/check.h"

namespace spillway::program {

BestFitHeap::BestFitHeap(int64_t alignment, int64_t give_up_above)
    : alignment_(alignment), give_up_above_(give_up_above) {
  SPILLWAY_CHECK(alignment > 0, "heap alignment must be positive");
}

int64_t BestFitHeap::RoundUp(int64_t bytes) const {
  return (bytes + alignment_ - 1) / alignment_ * alignment_;
}

void BestFitHeap::Alloc(int32_t buffer, int64_t bytes) {
  SPILLWAY_CHECK(bytes >= 0, "a buffer cannot have negative size");
  SPILLWAY_CHECK(buffer >= 0, "a buffer id cannot be negative");
  if (gave_up()) return;
  const auto id = static_cast<size_t>(buffer);
  if (id >= live_.size()) live_.resize(id + 1, Block{0, -1});
  SPILLWAY_CHECK(live_[id].bytes < 0, "buffer allocated twice without a free in between");

  // A zero-byte buffer overlaps nothing, so it can sit anywhere. Offset 0 is
  // aligned and inside every arena (even an empty one), and keeping it out of
  // the gap bookkeeping means it can never split a gap or move the top.
  if (bytes == 0) {
    live_[id] = Block{0, 0};
    placements_.emplace_back(buffer, 0);
    return;
  }

  const int64_t rounded = RoundUp(bytes);
  // The smallest gap that holds it, the lowest on a tie: the scan goes up
  // by offset and only a strictly smaller gap replaces the one found. Every
  // gap offset is a multiple of the alignment because every block size is,
  // so the gap's start is a valid offset as is.
  auto best = gaps_.end();
  for (auto gap = gaps_.begin(); gap != gaps_.end(); ++gap) {
    if (gap->bytes >= rounded && (best == gaps_.end() || gap->bytes < best->bytes)) {
      best = gap;
      if (gap->bytes == rounded) break;  // nothing fits closer, nor lower
    }
  }
  int64_t offset = 0;
  if (best != gaps_.end()) {
    offset = best->offset;
    if (best->bytes == rounded) {
      gaps_.erase(best);
    } else {  // what is left starts higher, still below the next gap
      best->offset += rounded;
      best->bytes -= rounded;
    }
  } else {
    // Nothing holds it: it goes on top. Free never leaves a gap touching the
    // top (it lowers end_ instead), so starting at end_ is the same as starting
    // at the top gap: the arena grows only by what that gap lacks.
    offset = end_;
    end_ = offset + rounded;
    arena_bytes_ = std::max(arena_bytes_, end_);
  }

  live_[id] = Block{offset, rounded};
  placements_.emplace_back(buffer, offset);
}

void BestFitHeap::Free(int32_t buffer) {
  if (gave_up()) return;  // its Alloc may not have been recorded
  const auto id = static_cast<size_t>(buffer);
  SPILLWAY_CHECK(buffer >= 0 && id < live_.size() && live_[id].bytes >= 0,
                 "freeing a buffer that is not live");
  const Block block = live_[id];
  live_[id].bytes = -1;
  if (block.bytes == 0) return;

  // Merge with the gap just below, then with the gap just above, so no two gaps
  // ever touch: otherwise a buffer that fits their union would miss both.
  auto next =
      std::upper_bound(gaps_.begin(), gaps_.end(), block.offset,
                       [](int64_t offset, const Block& gap) { return offset < gap.offset; });
  auto merged = gaps_.end();
  if (next != gaps_.begin() && std::prev(next)->offset + std::prev(next)->bytes == block.offset) {
    merged = std::prev(next);
    merged->bytes += block.bytes;
  }
  if (next != gaps_.end() && block.offset + block.bytes == next->offset) {
    if (merged != gaps_.end()) {
      merged->bytes += next->bytes;
      merged = std::prev(gaps_.erase(next));
    } else {
      next->offset = block.offset;
      next->bytes += block.bytes;
      merged = next;
    }
  }
  if (merged == gaps_.end()) merged = gaps_.insert(next, block);

  // Gaps live strictly below the top; a gap reaching it is just a lower top.
  // The arena keeps the highest top, since it must hold the highest point.
  if (merged->offset + merged->bytes == end_) {
    end_ = merged->offset;
    gaps_.erase(merged);
  }
}

absl::btree_map<int32_t, int64_t> HeapLayout::Offsets() const {
  absl::btree_map<int32_t, int64_t> offsets;
  // Ids usually rise in Alloc order, which the hint makes cheap.
  for (const auto& [buffer, offset] : placements) {
    offsets.insert_or_assign(offsets.end(), buffer, offset);
  }
  return offsets;
}

HeapLayout BestFitHeap::Finish() {
  HeapLayout layout;
  layout.arena_bytes = arena_bytes_;
  layout.alignment = alignment_;
  layout.complete = !gave_up();
  if (layout.complete) layout.placements = placements_;
  return layout;
}

namespace {

// The end of a buffer that is never freed: after every tick.
constexpr int64_t kLiveToTheEnd = std::numeric_limits<int64_t>::max();

using ByteRange = std::pair<int64_t, int64_t>;  // [begin, end)

// Writes the union of two sorted lists of ranges (each free of overlapping or
// touching ranges) to `out`, in the same form, and returns the end of what it
// wrote. `out` must not alias either input.
ByteRange* UnionOf(std::span<const ByteRange> a, std::span<const ByteRange> b, ByteRange* out) {
  ByteRange* written = out;
  auto push = [&](const ByteRange& range) {
    if (written != out && std::prev(written)->second >= range.first) {
      std::prev(written)->second = std::max(std::prev(written)->second, range.second);
    } else {
      *written++ = range;
    }
  };
  auto x = a.begin();
  auto y = b.begin();
  while (x != a.end() && y != b.end()) push(x->first <= y->first ? *x++ : *y++);
  // What is left of one list may still join the last range written, which
  // can reach past several of its ranges; from the first range that does not
  // join, the rest follows as is.
  auto rest = x != a.end() ? x : y;
  const auto rest_end = x != a.end() ? a.end() : b.end();
  while (rest != rest_end && written != out && std::prev(written)->second >= rest->first) {
    push(*rest++);
  }
  return std::copy(rest, rest_end, written);
}

// A union of byte ranges, kept as sorted ranges none of which overlap or touch.
// Ranges are only ever added: placement never takes a buffer back.
class RangeUnion {
 public:
  void Add(int64_t begin, int64_t end) {
    // The ranges that overlap or touch [begin, end) are consecutive: from the
    // first that ends at or after `begin` to the last that starts at or before
    // `end`. They all fold into one.
    const auto first = std::partition_point(ranges_.begin(), ranges_.end(),
                                            [&](const ByteRange& r) { return r.second < begin; });
    const auto last = std::partition_point(first, ranges_.end(),
                                           [&](const ByteRange& r) { return r.first <= end; });
    if (first == last) {
      ranges_.insert(first, ByteRange(begin, end));
      return;
    }
    *first = ByteRange(std::min(begin, first->first), std::max(end, std::prev(last)->second));
    ranges_.erase(std::next(first), last);
  }

  std::span<const ByteRange> ranges() const { return ranges_; }
  void Clear() { ranges_.clear(); }

 private:
  std::vector<ByteRange> ranges_;
};

// The bytes taken by placed buffers, searchable by time. Only the starts of
// buffers that take space matter as instants: two intervals overlap exactly
// when the later start lies in both. So time is the sequence of those starts,
// numbered 0..count-1 (slots), each buffer starting at its own slot and
// covering a range of slots from there.
//
// That rule splits the placed buffers that overlap a query's slots
// [first, last) into two sets with nothing in common: those that start
// before `first` and still cover it, and those that start in [first, last).
// A segment tree over the slots answers both. Each node keeps the union of
// the byte ranges of the buffers whose slot range covers the node's slots but
// not its parent's (`cover`): the buffers covering slot `first` are in the
// `cover` of the nodes on the path from the root to that slot's leaf. And
// each node keeps the union of the byte ranges of the buffers that start at
// one of its slots (`starts`): those starting in [first, last) are in the
// `starts` of the O(log n) nodes that make up that range. A query thus reads
// O(log n) unions, whose sizes count disjoint runs of taken bytes rather
// than buffers (long-lived buffers that sit side by side, which every
// short-lived one overlaps, count as one run), and no buffer twice.
//
// A buffer that lives to the end and starts before every placed buffer has
// ended overlaps all of them. Its query is the union of everything placed,
// kept as a list of its own. Among those, a buffer that lives to the end and
// starts before any buffer at all has ended overlaps every buffer, placed or
// not: so do the parameters and optimizer state a training step allocates
// first and never frees, a third of ResNet-152's buffers. Such buffers stay
// out of the tree, in one more list that every other query reads.
class PlacedBuffers {
 public:
  // Empty, for the buffers starting at slots 0, 1, ... whose slot ranges end
  // at `last_slot` (exclusive). The node vectors keep their capacity from the
  // last use: a planner lays out thousands of candidate Programs of one
  // shape, and allocation was a quarter of the time.
  void Reset(std::span<const size_t> last_slot) {
    const size_t slots = last_slot.size();
    slots_ = slots;
    earliest_last_ = slots;
    everything_.Clear();
    everywhere_.Clear();
    // Before a slot at which some earlier buffer has ended, nothing has.
    everywhere_below_ = 0;
    for (size_t ended = slots; everywhere_below_ < ended; ++everywhere_below_) {
      ended = std::min(ended, last_slot[everywhere_below_]);
    }
    nodes_.resize(2 * std::bit_ceil(slots));
    for (Node& node : nodes_) {
      node.cover.Clear();
      node.starts.Clear();
    }
  }

  // Marks bytes [begin, end) taken during slots [first, last), by the buffer
  // that starts at slot `first`.
  void Place(size_t first, size_t last, int64_t begin, int64_t end) {
    earliest_last_ = std::min(earliest_last_, last);
    everything_.Add(begin, end);
    if (first < everywhere_below_ && last == slots_) {
      everywhere_.Add(begin, end);
      return;
    }
    AddCover(1, 0, slots_, first, last, begin, end);
    OnPathTo(first, [&](Node& node) { node.starts.Add(begin, end); });
  }

  // The bytes taken at some slot in [first, last), as sorted ranges none of
  // which overlap or touch. The result points into the tree or into
  // `scratch_`, and is valid until the next Place or Taken.
  std::span<const ByteRange> Taken(size_t first, size_t last) {
    // Every placed buffer starts before `last` and ends after `first`.
    if (last == slots_ && first < earliest_last_) return everything_.ranges();
    lists_.clear();
    OnPathTo(first, [&](const Node& node) {
      if (!node.cover.ranges().empty()) lists_.push_back(node.cover.ranges());
    });
    CollectStarts(1, 0, slots_, first, last);
    if (!everywhere_.ranges().empty()) lists_.push_back(everywhere_.ranges());
    if (lists_.empty()) return {};
    // Fold the lists into one union, one after the other, between the two
    // scratch vectors (sized up front so that no span into them goes
    // stale). The union is short (the bytes free at one instant come in a
    // few gaps), so each fold costs about its list: in ResNet-152's planning
    // (counted before parameters left the tree), 9 lists and 36 ranges a
    // query folded into 2 or 3 ranges, where unions paired round by round
    // went over the 36 ranges about three times.
    size_t total = 0;
    for (const std::span<const ByteRange> list : lists_) total += list.size();
    for (std::vector<ByteRange>& scratch : scratch_) {
      if (scratch.size() < total) scratch.resize(total);
    }
    std::span<const ByteRange> folded = lists_.front();
    for (size_t i = 1; i < lists_.size(); ++i) {
      ByteRange* const out = scratch_[i % 2].data();
      folded = std::span<const ByteRange>(out, UnionOf(folded, lists_[i], out));
    }
    return folded;
  }

 private:
  struct Node {
    RangeUnion cover;
    RangeUnion starts;
  };

  // Calls `visit` on each node from the root down to the leaf of `slot`.
  template <typename Visit>
  void OnPathTo(size_t slot, Visit visit) {
    size_t node = 1;
    size_t lo = 0;
    size_t hi = slots_;
    while (true) {
      visit(nodes_[node]);
      if (hi - lo == 1) return;
      const size_t mid = lo + (hi - lo) / 2;
      if (slot < mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid;
      }
    }
  }

  void AddCover(size_t node, size_t lo, size_t hi, size_t first, size_t last, int64_t begin,
                int64_t end) {
    if (last <= lo || hi <= first) return;
    if (first <= lo && hi <= last) {
      nodes_[node].cover.Add(begin, end);
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    AddCover(2 * node, lo, mid, first, last, begin, end);
    AddCover(2 * node + 1, mid, hi, first, last, begin, end);
  }

  void CollectStarts(size_t node, size_t lo, size_t hi, size_t first, size_t last) {
    if (last <= lo || hi <= first) return;
    const RangeUnion& starts = nodes_[node].starts;
    if (starts.ranges().empty()) return;  // nothing placed starts below here
    if (first <= lo && hi <= last) {
      lists_.push_back(starts.ranges());
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    CollectStarts(2 * node, lo, mid, first, last);
    CollectStarts(2 * node + 1, mid, hi, first, last);
  }

  size_t slots_ = 0;
  size_t earliest_last_ = 0;     // the least `last` of the buffers placed
  RangeUnion everything_;        // the bytes of all buffers placed
  size_t everywhere_below_ = 0;  // buffers before it that live to the end overlap all
  RangeUnion everywhere_;        // the bytes of those placed, kept out of the tree
  std::vector<Node> nodes_;      // 1 is the root; node v has children 2v and 2v+1
  std::vector<std::span<const ByteRange>> lists_;
  std::vector<ByteRange> scratch_[2];
};

}  // namespace

DecreasingSizeBestFitHeap::DecreasingSizeBestFitHeap(int64_t alignment, int64_t give_up_above)
    : alignment_(alignment), give_up_above_(give_up_above) {
  SPILLWAY_CHECK(alignment > 0, "heap alignment must be positive");
}

int64_t DecreasingSizeBestFitHeap::RoundUp(int64_t bytes) const {
  return (bytes + alignment_ - 1) / alignment_ * alignment_;
}

void DecreasingSizeBestFitHeap::Alloc(int32_t buffer, int64_t bytes) {
  SPILLWAY_CHECK(bytes >= 0, "a buffer cannot have negative size");
  SPILLWAY_CHECK(buffer >= 0, "a buffer id cannot be negative");
  const auto id = static_cast<size_t>(buffer);
  if (id >= live_.size()) live_.resize(id + 1, -1);
  SPILLWAY_CHECK(live_[id] < 0, "buffer allocated twice without a free in between");
  live_[id] = static_cast<int64_t>(intervals_.size());
  intervals_.push_back(Interval{buffer, RoundUp(bytes), clock_++, kLiveToTheEnd});
}

void DecreasingSizeBestFitHeap::Free(int32_t buffer) {
  const auto id = static_cast<size_t>(buffer);
  SPILLWAY_CHECK(buffer >= 0 && id < live_.size() && live_[id] >= 0,
                 "freeing a buffer that is not live");
  intervals_[static_cast<size_t>(live_[id])].end = clock_++;
  live_[id] = -1;
}

HeapLayout DecreasingSizeBestFitHeap::Finish() {
  // Only buffers that take space are placed (zero-byte ones stay at offset 0).
  // intervals_ is in start order, so slots come out in start order too.
  std::vector<size_t> sized;  // slot -> index in intervals_
  std::vector<int64_t> starts;
  for (size_t i = 0; i < intervals_.size(); ++i) {
    if (intervals_[i].bytes == 0) continue;
    sized.push_back(i);
    starts.push_back(intervals_[i].start);
  }
  const size_t slots = sized.size();
  // A buffer covers the slots from its own up to the first start at or after
  // its end.
  std::vector<size_t> last_slot(slots);
  for (size_t slot = 0; slot < slots; ++slot) {
    const int64_t end = intervals_[sized[slot]].end;
    last_slot[slot] =
        static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), end) - starts.begin());
  }

  // Slots, largest buffer first, sorted with their sizes beside them
  // (reading the sizes through the slot index missed the cache). Slots are
  // in start order and the sort is stable, so equal sizes go earlier Alloc
  // first (starts are distinct ticks: the id never decides).
  struct Key {
    int64_t bytes;
    size_t slot;
  };
  std::vector<Key> keys(slots);
  for (size_t slot = 0; slot < slots; ++slot) keys[slot] = {intervals_[sized[slot]].bytes, slot};
  std::stable_sort(keys.begin(), keys.end(),
                   [](const Key& x, const Key& y) { return x.bytes > y.bytes; });

  std::vector<int64_t> offsets(intervals_.size(), 0);
  // One per thread: the planner lays out candidates on several threads.
  thread_local PlacedBuffers placed;
  placed.Reset(last_slot);
  int64_t arena_bytes = 0;
  for (const Key& key : keys) {
    const size_t slot = key.slot;
    const size_t index = sized[slot];
    const int64_t size = intervals_[index].bytes;
    // Between consecutive taken ranges lie the free gaps; their starts are
    // buffer ends, hence multiples of the alignment. `top` ends up as the
    // highest end among the overlapping buffers.
    int64_t best_offset = -1;
    int64_t best_size = 0;
    int64_t top = 0;
    for (const auto& [begin, end] : placed.Taken(slot, last_slot[slot])) {
      const int64_t gap = begin - top;
      // Strictly smaller: on a tie the lower gap, found first, stays chosen.
      if (gap >= size && (best_offset < 0 || gap < best_size)) {
        best_offset = top;
        best_size = gap;
      }
      top = std::max(top, end);
    }
    const int64_t offset = best_offset >= 0 ? best_offset : top;
    offsets[index] = offset;
    arena_bytes = std::max(arena_bytes, offset + size);
    if (arena_bytes > give_up_above_) {
      HeapLayout rejected;
      rejected.arena_bytes = arena_bytes;
      rejected.alignment = alignment_;
      rejected.complete = false;
      return rejected;
    }
    placed.Place(slot, last_slot[slot], offset, offset + size);
  }

  HeapLayout layout;
  layout.arena_bytes = arena_bytes;
  layout.alignment = alignment_;
  // Intervals are in Alloc order, as placements are.
  layout.placements.reserve(intervals_.size());
  for (size_t i = 0; i < intervals_.size(); ++i) {
    layout.placements.emplace_back(intervals_[i].buffer, offsets[i]);
  }
  return layout;
}

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
