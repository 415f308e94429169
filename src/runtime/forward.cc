#include "runtime/forward.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "program/plan.h"
#include "program/rewriter.h"
#include "runtime/runtime.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::runtime {
namespace {

absl::Status CheckInputs(const ir::Graph& graph, const ForwardInputs& inputs) {
  for (const auto& [name, bytes] : inputs) {
    const std::optional<ir::ValueId> id = graph.FindValue(name);
    if (!id || graph.value(*id).producer != ir::kNoNode) {
      return absl::InvalidArgumentError(
          fmt::format("graph '{}' has no input named '{}'", graph.name(), name));
    }
  }
  std::vector<std::string> missing;
  for (ir::ValueId id : graph.inputs()) {
    const ir::Value& value = graph.value(id);
    const auto it = inputs.find(value.name);
    if (it == inputs.end()) {
      missing.push_back(value.name);
      continue;
    }
    if (static_cast<int64_t>(it->second.size()) != value.type.bytes()) {
      return absl::InvalidArgumentError(fmt::format("input '{}' is {}: {} bytes, not {}",
                                                    value.name, ir::TypeToString(value.type),
                                                    value.type.bytes(), it->second.size()));
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("no bytes for the graph inputs {}", fmt::join(missing, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ForwardResult> RunForward(const ir::Graph& graph, backends::Backend& backend,
                                         const ForwardInputs& inputs,
                                         const ForwardOptions& options) {
  for (const ir::Node& node : graph.nodes()) {
    if (node.phase != ir::Phase::kForward) {
      return absl::InvalidArgumentError(
          fmt::format("node '{}' ({}) is a {} node; only forward graphs can be run this way",
                      node.name, ir::OpName(node.op), ir::PhaseName(node.phase)));
    }
  }
  if (static_cast<int64_t>(graph.TopologicalOrder().size()) != graph.num_nodes()) {
    return absl::InvalidArgumentError(fmt::format("graph '{}' has a cycle", graph.name()));
  }
  RETURN_IF_ERROR(CheckInputs(graph, inputs));

  // The plan that keeps every value on the device: each is allocated when its
  // producer runs and freed after its last reader, on an arena laid out for
  // exactly that.
  const program::Plan keep("forward", graph);
  ASSIGN_OR_RETURN(const program::Program program,
                   program::BuildProgram(graph, program::TrainingSchedule(graph), keep));
  ASSIGN_OR_RETURN(const std::unique_ptr<Runtime> runtime,
                   Runtime::Create(program, backend, program.arena_bytes));
  for (ir::ValueId id : graph.inputs()) {
    RETURN_IF_ERROR(runtime->Write(id, inputs.find(graph.value(id).name)->second));
  }
  StepOptions step_options;
  step_options.step = options.step;
  ASSIGN_OR_RETURN(const StepResult step, runtime->RunStep(step_options));

  ForwardResult result;
  result.seconds = step.seconds;
  result.peak_device_bytes = step.peak_resident_bytes;
  for (ir::ValueId id : graph.outputs()) {
    std::vector<std::byte>& bytes =
        result.outputs.emplace_back(static_cast<size_t>(graph.value(id).type.bytes()));
    RETURN_IF_ERROR(runtime->Read(id, bytes));
  }
  return result;
}

ir::Shape FrameworkShape(const ir::TensorType& type) {
  if (type.layout != ir::Layout::kNHWC) return type.shape;
  const ir::Shape& s = type.shape;
  return {s[0], s[3], s[1], s[2]};
}

namespace {

// Copies between NHWC and NCHW: `to_nchw` says which way.
std::vector<std::byte> Transpose(const ir::TensorType& type, std::span<const std::byte> bytes,
                                 bool to_nchw) {
  SPILLWAY_CHECK(static_cast<int64_t>(bytes.size()) == type.bytes(),
                 "layout conversion needs the whole value");
  if (type.layout != ir::Layout::kNHWC) return {bytes.begin(), bytes.end()};
  const int64_t n = type.shape[0], h = type.shape[1], w = type.shape[2], c = type.shape[3];
  const size_t size = static_cast<size_t>(ir::DTypeSize(type.dtype));
  std::vector<std::byte> out(bytes.size());
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        for (int64_t k = 0; k < c; ++k) {
          const size_t nhwc = static_cast<size_t>(((b * h + y) * w + x) * c + k) * size;
          const size_t nchw = static_cast<size_t>(((b * c + k) * h + y) * w + x) * size;
          const size_t from = to_nchw ? nhwc : nchw;
          const size_t to = to_nchw ? nchw : nhwc;
          std::memcpy(out.data() + to, bytes.data() + from, size);
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<std::byte> ToFrameworkOrder(const ir::TensorType& type,
                                        std::span<const std::byte> bytes) {
  return Transpose(type, bytes, /*to_nchw=*/true);
}

std::vector<std::byte> FromFrameworkOrder(const ir::TensorType& type,
                                          std::span<const std::byte> bytes) {
  return Transpose(type, bytes, /*to_nchw=*/false);
}

}  // namespace spillway::runtime
