// Optimal recomputation on a chain, in the model of Chen et al. (2016).
//
// A chain is a sequence of saved tensors t_1..t_n, each computed from the one
// before (t_1 from the chain's input, always resident). Some are checkpoints
// and stay resident; the rest are freed after the forward pass and, in the
// backward pass, rebuilt one segment at a time (a segment is a maximal run of
// non-checkpoints) from the checkpoint before it. While a segment is being
// differentiated all of it is resident, so
//
//   peak = sum of checkpoint bytes + the largest segment's bytes
//   cost = sum of the rebuild times of the non-checkpoints
//
// SolveChain minimizes the cost subject to peak <= limit exactly: for each
// candidate largest segment L it runs a dynamic program over "the last
// checkpoint is t_i" whose states are the Pareto frontier of (checkpoint
// bytes, rebuild time saved). The previous checkpoint of t_i lies in a window
// of positions that slides right with i, so the frontier at t_i is that of
// the union of the window's frontiers, kept for the window as it slides;
// among states that tie exactly, the one whose previous checkpoint is later
// wins, so the plan depends on the chain alone. BruteForceChain enumerates
// every subset, for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace spillway::planner {

struct ChainTensor {
  int64_t bytes = 0;
  double rebuild_s = 0;
};

struct ChainSolution {
  bool feasible = false;
  std::vector<bool> checkpoint;  // one per tensor
  int64_t peak_bytes = 0;
  double rebuild_s = 0;
};

struct ChainOptions {
  // Candidate largest-segment sizes: 0 means every contiguous sum (exact,
  // O(n^2) candidates); otherwise that many sizes on a geometric grid (for
  // long chains, where the answer is then a good plan rather than the best).
  int segment_candidates = 0;
  // Frontier states kept per position; 0 keeps them all (exact).
  int max_frontier = 0;
  // Polled once per chain position: true stops the solve, which returns the
  // best plan among the candidate segment sizes it finished (infeasible if
  // none). The planner's wall-clock safety net; null: never stops.
  std::function<bool()> stop = nullptr;
};

int64_t ChainPeak(std::span<const ChainTensor> chain, const std::vector<bool>& checkpoint);
double ChainRebuildSeconds(std::span<const ChainTensor> chain, const std::vector<bool>& checkpoint);

// The largest-segment sizes SolveChain tries: 0 and, with `grid` 0, every
// contiguous sum up to `limit_bytes`, else `grid` sizes on a geometric grid
// (ChainOptions::segment_candidates); sorted, without repeats.
std::vector<int64_t> ChainSegmentSizes(std::span<const ChainTensor> chain, int64_t limit_bytes,
                                       int grid);

ChainSolution SolveChain(std::span<const ChainTensor> chain, int64_t limit_bytes,
                         const ChainOptions& options = {});

// Every subset of checkpoints: 2^n plans. For tests on short chains.
ChainSolution BruteForceChain(std::span<const ChainTensor> chain, int64_t limit_bytes);

}  // namespace spillway::planner
