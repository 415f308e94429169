#include "planner/chain_checkpointing.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// Keeps the states no other state beats on both counts, by increasing bytes.
void Prune(std::vector<State>& states, int max_frontier) {
  std::sort(states.begin(), states.end(), [](const State& a, const State& b) {
    return a.kept < b.kept || (a.kept == b.kept && a.saved_s > b.saved_s);
  });
  std::vector<State> frontier;
  for (const State& state : states) {
    if (frontier.empty() || state.saved_s > frontier.back().saved_s) frontier.push_back(state);
  }
  if (max_frontier > 0 && static_cast<int>(frontier.size()) > max_frontier) {
    // Thin evenly by position in the frontier, keeping both ends.
    std::vector<State> thinned;
    const double stride = static_cast<double>(frontier.size() - 1) / (max_frontier - 1);
    for (int k = 0; k < max_frontier; ++k) {
      thinned.push_back(frontier[static_cast<size_t>(std::lround(k * stride))]);
    }
    frontier = std::move(thinned);
  }
  states = std::move(frontier);
}

std::vector<int64_t> SegmentCandidates(std::span<const ChainTensor> chain, int64_t limit,
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

}  // namespace

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
  for (int64_t segment : SegmentCandidates(chain, limit_bytes, options.segment_candidates)) {
    const int64_t room = limit_bytes - segment;  // for checkpoints
    if (room < 0) continue;
    // frontier[i + 1]: the states whose last checkpoint is t_i; frontier[0]
    // is the chain input, which holds nothing.
    std::vector<std::vector<State>> frontier(static_cast<size_t>(n) + 2);
    frontier[0] = {State{}};
    for (int i = 0; i <= n; ++i) {  // i == n: the end of the chain
      if (options.stop && options.stop()) return best;
      std::vector<State> states;
      for (int from = i - 1; from >= -1; --from) {
        if (between(from, i) > segment) break;  // segments only grow going back
        for (size_t k = 0; k < frontier[static_cast<size_t>(from) + 1].size(); ++k) {
          const State& previous = frontier[static_cast<size_t>(from) + 1][k];
          State next = previous;
          if (i < n) {
            next.kept += chain[static_cast<size_t>(i)].bytes;
            next.saved_s += chain[static_cast<size_t>(i)].rebuild_s;
          }
          if (next.kept > room) continue;
          next.from = from;
          next.parent = static_cast<int>(k);
          states.push_back(next);
        }
      }
      Prune(states, options.max_frontier);
      frontier[static_cast<size_t>(i) + 1] = std::move(states);
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
