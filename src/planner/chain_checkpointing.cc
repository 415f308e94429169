#include "planner/chain_checkpointing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "support/check.h"

namespace spillway::planner {

int64_t ChainPeak(std::span<const ChainTensor> chain, const std::vector<bool>& checkpoint) {
  int64_t kept = 0;
  int64_t segment = 0;
  int64_t largest = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (checkpoint[i]) {
      kept += chain[i].bytes;
      segment = 0;
    } else {
      segment += chain[i].bytes;
      largest = std::max(largest, segment);
    }
  }
  return kept + largest;
}

double ChainRebuildSeconds(std::span<const ChainTensor> chain,
                           const std::vector<bool>& checkpoint) {
  double seconds = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!checkpoint[i]) seconds += chain[i].rebuild_s;
  }
  return seconds;
}

namespace {

// A partial plan whose last checkpoint is at some position: what its
// checkpoints hold and the rebuild time they save. `from` and `parent` lead
// back to the previous state, to recover the checkpoints.
struct State {
  int64_t kept = 0;
  double saved_s = 0;
  int from = -1;    // position of the previous checkpoint (-1: the chain input)
  int parent = -1;  // index of the state there
};

// A state of the frontier at `position` (-1: the chain input), as the states
// after it see it: what it holds and saves, and where it is.
struct Ref {
  int64_t kept = 0;
  double saved_s = 0;
  int position = -1;
  int index = 0;
};

// The order in which frontiers are read: fewer bytes first, then more saved;
// among exact ties, the later position and then the lower index, which makes
// the plan a function of the chain alone (not of a sort's handling of ties).
bool Before(const Ref& a, const Ref& b) {
  if (a.kept != b.kept) return a.kept < b.kept;
  if (a.saved_s != b.saved_s) return a.saved_s > b.saved_s;
  if (a.position != b.position) return a.position > b.position;
  return a.index < b.index;
}

// The states of two frontiers that no other state of either beats on both
// counts, in the order above. A frontier so merged is one too, and merging
// is associative: the frontier of a union does not depend on how it is split.
std::vector<Ref> MergeFrontiers(std::span<const Ref> a, std::span<const Ref> b) {
  std::vector<Ref> merged;
  merged.reserve(a.size() + b.size());
  auto keep = [&](const Ref& ref) {
    if (merged.empty() || ref.saved_s > merged.back().saved_s) merged.push_back(ref);
  };
  auto x = a.begin();
  auto y = b.begin();
  while (x != a.end() && y != b.end()) keep(Before(*y, *x) ? *y++ : *x++);
  for (; x != a.end(); ++x) keep(*x);
  for (; y != b.end(); ++y) keep(*y);
  return merged;
}

// The frontier of the union of the frontiers at a window of positions that
// only ever grows at its end and shrinks at its start (a queue made of two
// stacks, each entry of the front stack holding the union of itself and the
// entries below it): each position is merged O(1) times on average.
class WindowFrontier {
 public:
  void PushBack(std::vector<Ref> frontier) {
    back_union_ = MergeFrontiers(back_union_, frontier);
    back_.push_back(std::move(frontier));
  }

  void PopFront() {
    if (front_.empty()) {
      std::vector<Ref> below;
      for (auto it = back_.rbegin(); it != back_.rend(); ++it) {
        below = MergeFrontiers(*it, below);
        front_.push_back(below);
      }
      back_.clear();
      back_union_.clear();
    }
    SPILLWAY_CHECK(!front_.empty(), "popping an empty window");
    front_.pop_back();
  }

  std::vector<Ref> Union() const {
    if (front_.empty()) return back_union_;
    return MergeFrontiers(front_.back(), back_union_);
  }

 private:
  std::vector<std::vector<Ref>> front_;  // oldest last
  std::vector<std::vector<Ref>> back_;   // newest last
  std::vector<Ref> back_union_;
};

// Keeps `count` states of a frontier, evenly by position in it, both ends
// included.
std::vector<State> Thin(std::vector<State> frontier, int count) {
  if (count <= 0 || static_cast<int>(frontier.size()) <= count) return frontier;
  std::vector<State> thinned;
  const double stride = static_cast<double>(frontier.size() - 1) / (count - 1);
  for (int k = 0; k < count; ++k) {
    thinned.push_back(frontier[static_cast<size_t>(std::lround(k * stride))]);
  }
  return thinned;
}

}  // namespace

std::vector<int64_t> ChainSegmentSizes(std::span<const ChainTensor> chain, int64_t limit,
                                       int grid) {
  std::vector<int64_t> sizes{0};
  if (grid == 0) {
    for (size_t i = 0; i < chain.size(); ++i) {
      int64_t sum = 0;
      for (size_t j = i; j < chain.size(); ++j) {
        sum += chain[j].bytes;
        if (sum <= limit) sizes.push_back(sum);
      }
    }
  } else {
    int64_t smallest = std::numeric_limits<int64_t>::max();
    int64_t total = 0;
    for (const ChainTensor& tensor : chain) {
      smallest = std::min(smallest, std::max<int64_t>(tensor.bytes, 1));
      total += tensor.bytes;
    }
    const double top = static_cast<double>(std::min(total, limit));
    if (!chain.empty() && top >= static_cast<double>(smallest)) {
      const double ratio =
          grid > 1 ? std::pow(top / static_cast<double>(smallest), 1.0 / (grid - 1)) : 1;
      double size = static_cast<double>(smallest);
      for (int k = 0; k < grid; ++k, size *= ratio) sizes.push_back(static_cast<int64_t>(size));
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

ChainSolution SolveChain(std::span<const ChainTensor> chain, int64_t limit_bytes,
                         const ChainOptions& options) {
  const int n = static_cast<int>(chain.size());
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  double total_s = 0;
  for (int i = 0; i < n; ++i) {
    prefix[static_cast<size_t>(i) + 1] =
        prefix[static_cast<size_t>(i)] + chain[static_cast<size_t>(i)].bytes;
    total_s += chain[static_cast<size_t>(i)].rebuild_s;
  }
  // Bytes of the tensors strictly between positions a and b (a, b in -1..n).
  auto between = [&](int a, int b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a) + 1];
  };

  ChainSolution best;
  for (int64_t segment : ChainSegmentSizes(chain, limit_bytes, options.segment_candidates)) {
    const int64_t room = limit_bytes - segment;  // for checkpoints
    if (room < 0) continue;
    // frontier[i + 1]: the states whose last checkpoint is t_i, by
    // increasing bytes and savings; frontier[0] is the chain input, which
    // holds nothing.
    std::vector<std::vector<State>> frontier(static_cast<size_t>(n) + 2);
    frontier[0] = {State{}};
    // The previous checkpoint of t_i can be any position whose segment up to
    // t_i fits `segment`: a window of positions that moves right with i.
    WindowFrontier window;
    int oldest = -1;                // the window's first position
    for (int i = 0; i <= n; ++i) {  // i == n: the end of the chain
      if (options.stop && options.stop()) return best;
      std::vector<Ref> newest;
      const std::vector<State>& last = frontier[static_cast<size_t>(i)];  // position i - 1
      for (size_t k = 0; k < last.size(); ++k) {
        newest.push_back({last[k].kept, last[k].saved_s, i - 1, static_cast<int>(k)});
      }
      window.PushBack(std::move(newest));
      for (; between(oldest, i) > segment; ++oldest) window.PopFront();
      const int64_t bytes = i < n ? chain[static_cast<size_t>(i)].bytes : 0;
      const double rebuild_s = i < n ? chain[static_cast<size_t>(i)].rebuild_s : 0;
      std::vector<State> states;
      for (const Ref& ref : window.Union()) {
        if (ref.kept + bytes > room) break;  // the union is by increasing bytes
        states.push_back({ref.kept + bytes, ref.saved_s + rebuild_s, ref.position, ref.index});
      }
      frontier[static_cast<size_t>(i) + 1] = Thin(std::move(states), options.max_frontier);
    }
    const std::vector<State>& ends = frontier[static_cast<size_t>(n) + 1];
    if (ends.empty()) continue;
    // The frontier is sorted by bytes with rising savings: the last saves most.
    const State& end = ends.back();
    const double rebuild_s = total_s - end.saved_s;
    if (best.feasible && rebuild_s >= best.rebuild_s) continue;
    std::vector<bool> checkpoint(static_cast<size_t>(n), false);
    int position = end.from;
    int index = end.parent;
    while (position >= 0) {
      checkpoint[static_cast<size_t>(position)] = true;
      const State& state = frontier[static_cast<size_t>(position) + 1][static_cast<size_t>(index)];
      position = state.from;
      index = state.parent;
    }
    best.feasible = true;
    best.checkpoint = std::move(checkpoint);
    best.rebuild_s = rebuild_s;
    best.peak_bytes = ChainPeak(chain, best.checkpoint);
    SPILLWAY_CHECK(best.peak_bytes <= limit_bytes, "a chain plan respects its limit");
  }
  return best;
}

ChainSolution BruteForceChain(std::span<const ChainTensor> chain, int64_t limit_bytes) {
  const size_t n = chain.size();
  SPILLWAY_CHECK(n < 24, "brute force is for short chains");
  ChainSolution best;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    std::vector<bool> checkpoint(n);
    for (size_t i = 0; i < n; ++i) checkpoint[i] = (mask >> i) & 1u;
    const int64_t peak = ChainPeak(chain, checkpoint);
    if (peak > limit_bytes) continue;
    const double rebuild_s = ChainRebuildSeconds(chain, checkpoint);
    if (!best.feasible || rebuild_s < best.rebuild_s) {
      best = {true, checkpoint, peak, rebuild_s};
    }
  }
  return best;
}

}  // namespace spillway::planner
