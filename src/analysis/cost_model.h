// How long an op or a copy takes. The planner and the simulator only see this
// interface, so measured per-op times can replace the roofline estimates
// (profile-guided planning) without touching either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "analysis/hardware.h"
#include "ir/graph.h"

namespace spillway::analysis {

enum class CopyDirection : uint8_t { kDeviceToHost, kHostToDevice };

// How much copies and kernels slow each other down while they overlap, where
// they share a resource (on the CPU, the cores and the memory bus; a GPU's
// copy engines and its SMs share nothing unless measured otherwise). While a
// copy runs, a kernel progresses at 1 / (1 + compute_slowdown) of its rate;
// while a kernel runs, a copy at 1 / (1 + copy_slowdown) of its own. Both 0:
// independent resources.
struct Contention {
  double compute_slowdown = 0;
  double copy_slowdown = 0;
  bool any() const { return compute_slowdown > 0 || copy_slowdown > 0; }
  bool operator==(const Contention&) const = default;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Seconds one node takes on the compute stream, launch overhead included.
  // A recomputed node takes the same time as the original.
  virtual double NodeSeconds(const ir::Graph& graph, const ir::Node& node) const = 0;
  // Seconds one copy of `bytes` takes on its stream, latency included.
  virtual double CopySeconds(int64_t bytes, CopyDirection direction) const = 0;
  // How copies and kernels slow each other while they overlap (the times
  // above are each alone).
  virtual Contention contention() const { return {}; }
};

// The roofline: the larger of FLOPs over the sustained compute rate and bytes
// moved over the sustained memory bandwidth, plus the launch overhead.
// Convolutions and matrix products use the math mode's rate and efficiency
// (fp32's where the part has none for the mode, as V100 has no tf32);
// everything else is memory-bound, though its FLOPs still count at the fp32
// rate so that an op with much arithmetic per byte is not free. Bytes are
// those of the graph's dtypes, halved in fp16 mode, which stands for mixed
// precision (activations and gradients in 2 bytes, as PyTorch's AMP runs);
// buffer sizes, and so plans, stay those of the graph's types.
class RooflineCostModel final : public CostModel {
 public:
  struct Options {
    MathMode math_mode = MathMode::kFp32;
  };
  RooflineCostModel(HardwareProfile profile, Options options);
  explicit RooflineCostModel(HardwareProfile profile) : RooflineCostModel(std::move(profile), {}) {}

  double NodeSeconds(const ir::Graph& graph, const ir::Node& node) const override;
  double CopySeconds(int64_t bytes, CopyDirection direction) const override;
  const HardwareProfile& profile() const { return profile_; }

 private:
  HardwareProfile profile_;
  Options options_;
  // Sustained rates, derated by the profile's efficiencies.
  double matrix_flops_per_s_ = 0;  // convolutions and matrix products
  double other_flops_per_s_ = 0;   // everything else: fp32 CUDA cores
  double memory_bytes_per_s_ = 0;
  double bytes_per_element_factor_ = 1.0;  // 0.5 in fp16 (mixed precision)
};

// Copy time as latency plus bytes over bandwidth (a line fitted to measured
// copies, analysis/costs_file.h).
struct CopyLine {
  double latency_s = 0;
  double bytes_per_s = 0;
  double Seconds(int64_t bytes) const {
    return latency_s + static_cast<double>(bytes) / bytes_per_s;
  }
};

// Times given per node (a graph file's durations, a costs file's
// measurements), the rest from another model: the nodes the table has no
// time for and, unless lines are given, the copies. A recomputed node is the
// original node run again, so it finds its time here too. Its contention is
// the one given (a costs file's), else the fallback's.
class TabulatedCostModel final : public CostModel {
 public:
  struct CopyLines {
    CopyLine to_host;
    CopyLine to_device;
  };
  // node_seconds[id] is node id's time, or nullopt for `fallback`'s; the
  // table has an entry for every node of the graphs it costs.
  TabulatedCostModel(std::vector<std::optional<double>> node_seconds,
                     std::unique_ptr<const CostModel> fallback,
                     std::optional<CopyLines> copies = std::nullopt,
                     std::optional<Contention> contention = std::nullopt);

  double NodeSeconds(const ir::Graph& graph, const ir::Node& node) const override;
  double CopySeconds(int64_t bytes, CopyDirection direction) const override;
  Contention contention() const override;

 private:
  std::vector<std::optional<double>> node_seconds_;
  std::unique_ptr<const CostModel> fallback_;
  std::optional<CopyLines> copies_;
  std::optional<Contention> contention_;
};

// NodeSeconds for every node of a graph, indexed by node id.
std::vector<double> NodeTimes(const CostModel& cost_model, const ir::Graph& graph);

}  // namespace spillway::analysis
