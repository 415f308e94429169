#include "analysis/cost_model.h"

#include <algorithm>
#include <cmath>

#include "ir/op_registry.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::analysis {

RooflineCostModel::RooflineCostModel(HardwareProfile profile, Options options)
    : profile_(std::move(profile)), options_(options) {
  // A profile from a file or a preset is already valid; one built in code is
  // not checked anywhere else, and a zero rate would make every time infinite.
  const absl::Status valid = ValidateHardwareProfile(profile_);
  if (!valid.ok()) {
    // SPILLWAY_CHECK takes only a literal message; this one must say which field.
    internal::CheckFailed("ValidateHardwareProfile(profile).ok()", __FILE__, __LINE__,
                          StatusMessage(valid));
  }
  // cuDNN and cuBLAS run a mode the part lacks (tf32 on V100) in fp32.
  const MathMode mode =
      profile_.peak_flops(options_.math_mode) > 0 ? options_.math_mode : MathMode::kFp32;
  matrix_flops_per_s_ = profile_.peak_flops(mode) * profile_.efficiency(mode);
  // fp16 stands for mixed precision as frameworks run it (PyTorch's AMP):
  // activations and gradients move in 2 bytes, so memory traffic halves.
  // Buffers are still sized in fp32 (the IR's type): a conservative plan.
  bytes_per_element_factor_ = mode == MathMode::kFp16 ? 0.5 : 1.0;
  other_flops_per_s_ = profile_.fp32_flops * profile_.compute_efficiency;
  memory_bytes_per_s_ = profile_.memory_bandwidth * profile_.memory_efficiency;
}

double RooflineCostModel::NodeSeconds(const ir::Graph& graph, const ir::Node& node) const {
  const ir::OpCost cost = ir::NodeCost(graph, node);
  const ir::OpClass op_class = ir::GetOpDef(node.op).op_class;
  const bool matrix = op_class == ir::OpClass::kConvolution || op_class == ir::OpClass::kMatMul;
  const double compute_s =
      static_cast<double>(cost.flops) / (matrix ? matrix_flops_per_s_ : other_flops_per_s_);
  const double memory_s = bytes_per_element_factor_ *
                          static_cast<double>(cost.bytes_read + cost.bytes_written) /
                          memory_bytes_per_s_;
  return profile_.launch_overhead_s + std::max(compute_s, memory_s);
}

double RooflineCostModel::CopySeconds(int64_t bytes, CopyDirection direction) const {
  SPILLWAY_CHECK(bytes >= 0, "a copy of a negative number of bytes");
  const bool to_host = direction == CopyDirection::kDeviceToHost;
  const double latency_s = to_host ? profile_.d2h_latency_s : profile_.h2d_latency_s;
  const double bandwidth = to_host ? profile_.d2h_bandwidth : profile_.h2d_bandwidth;
  return latency_s + static_cast<double>(bytes) / bandwidth;
}

TabulatedCostModel::TabulatedCostModel(std::vector<std::optional<double>> node_seconds,
                                       std::unique_ptr<const CostModel> fallback,
                                       std::optional<CopyLines> copies,
                                       std::optional<Contention> contention)
    : node_seconds_(std::move(node_seconds)),
      fallback_(std::move(fallback)),
      copies_(copies),
      contention_(contention) {
  SPILLWAY_CHECK(fallback_ != nullptr, "a tabulated cost model needs a fallback model");
  SPILLWAY_CHECK(
      !contention_ ||
          (std::isfinite(contention_->compute_slowdown) && contention_->compute_slowdown >= 0 &&
           std::isfinite(contention_->copy_slowdown) && contention_->copy_slowdown >= 0),
      "slowdowns are finite and >= 0");
  for (const std::optional<double>& seconds : node_seconds_) {
    SPILLWAY_CHECK(!seconds || (std::isfinite(*seconds) && *seconds >= 0),
                   "node times are finite and >= 0");
  }
}

double TabulatedCostModel::NodeSeconds(const ir::Graph& graph, const ir::Node& node) const {
  SPILLWAY_CHECK(node.id >= 0 && static_cast<size_t>(node.id) < node_seconds_.size(),
                 "a tabulated cost model has an entry for every node it is asked about");
  const std::optional<double>& seconds = node_seconds_[static_cast<size_t>(node.id)];
  return seconds ? *seconds : fallback_->NodeSeconds(graph, node);
}

double TabulatedCostModel::CopySeconds(int64_t bytes, CopyDirection direction) const {
  if (!copies_) return fallback_->CopySeconds(bytes, direction);
  SPILLWAY_CHECK(bytes >= 0, "a copy of a negative number of bytes");
  return (direction == CopyDirection::kDeviceToHost ? copies_->to_host : copies_->to_device)
      .Seconds(bytes);
}

Contention TabulatedCostModel::contention() const {
  return contention_ ? *contention_ : fallback_->contention();
}

std::vector<double> NodeTimes(const CostModel& cost_model, const ir::Graph& graph) {
  std::vector<double> times;
  times.reserve(static_cast<size_t>(graph.num_nodes()));
  for (const ir::Node& node : graph.nodes()) {
    SPILLWAY_CHECK(static_cast<size_t>(node.id) == times.size(), "node ids are not positions");
    times.push_back(cost_model.NodeSeconds(graph, node));
  }
  return times;
}

}  // namespace spillway::analysis
