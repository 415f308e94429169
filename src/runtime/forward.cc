#include "runtime/forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::runtime {
namespace {

using backends::TensorRef;

// Last uses, as positions in the node order: kBeforeNodes, a graph input that
// no node reads (never allocated); kKeep, a graph output.
constexpr int64_t kBeforeNodes = -1;
constexpr int64_t kKeep = std::numeric_limits<int64_t>::max();  // a graph output's

struct Buffer {
  int64_t bytes = 0;
  int64_t last_use = kBeforeNodes;
  void* data = nullptr;
};

// The device buffers of one run; whatever is still allocated when it ends
// (after an error too) is freed.
class Buffers {
 public:
  explicit Buffers(backends::Backend& backend) : backend_(backend) {}
  ~Buffers() {
    for (Buffer& buffer : buffers_) Free(buffer);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  size_t Add(int64_t bytes) {
    buffers_.push_back({.bytes = bytes});
    return buffers_.size() - 1;
  }
  Buffer& operator[](size_t index) { return buffers_[index]; }
  size_t size() const { return buffers_.size(); }

  absl::Status Allocate(Buffer& buffer) {
    // The backend may refuse 0 bytes; a tensor with no elements still needs
    // an address.
    ASSIGN_OR_RETURN(buffer.data, backend_.AllocateDevice(std::max<int64_t>(buffer.bytes, 1)));
    allocated_ += buffer.bytes;
    peak_ = std::max(peak_, allocated_);
    return absl::OkStatus();
  }
  void Free(Buffer& buffer) {
    if (buffer.data == nullptr) return;
    backend_.FreeDevice(buffer.data);
    buffer.data = nullptr;
    allocated_ -= buffer.bytes;
  }
  int64_t peak() const { return peak_; }

 private:
  backends::Backend& backend_;
  std::vector<Buffer> buffers_;
  int64_t allocated_ = 0;
  int64_t peak_ = 0;
};

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
  const std::vector<ir::NodeId> order = graph.TopologicalOrder();
  if (static_cast<int64_t>(order.size()) != graph.num_nodes()) {
    return absl::InvalidArgumentError(fmt::format("graph '{}' has a cycle", graph.name()));
  }
  RETURN_IF_ERROR(CheckInputs(graph, inputs));

  // Assign buffers and find each one's last use before running anything.
  Buffers buffers(backend);
  std::vector<size_t> buffer_of(static_cast<size_t>(graph.num_values()));
  for (ir::ValueId id : graph.inputs()) {
    buffer_of[static_cast<size_t>(id)] = buffers.Add(graph.value(id).type.bytes());
  }
  for (size_t position = 0; position < order.size(); ++position) {
    const ir::Node& node = graph.node(order[position]);
    const int64_t use = static_cast<int64_t>(position);
    for (ir::ValueId input : node.inputs)
      buffers[buffer_of[static_cast<size_t>(input)]].last_use = use;
    const ir::OpDef& def = ir::GetOpDef(node.op);
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const auto in_place =
          std::find_if(def.in_place.begin(), def.in_place.end(),
                       [&](const auto& pair) { return pair.first == static_cast<int>(k); });
      const size_t output = static_cast<size_t>(node.outputs[k]);
      buffer_of[output] =
          in_place != def.in_place.end()
              ? buffer_of[static_cast<size_t>(node.inputs[static_cast<size_t>(in_place->second)])]
              : buffers.Add(graph.value(node.outputs[k]).type.bytes());
      buffers[buffer_of[output]].last_use = use;
    }
  }
  for (ir::ValueId id : graph.outputs())
    buffers[buffer_of[static_cast<size_t>(id)]].last_use = kKeep;
  std::vector<std::vector<size_t>> free_after(order.size());
  for (size_t b = 0; b < buffers.size(); ++b) {
    const int64_t last_use = buffers[b].last_use;
    if (last_use != kBeforeNodes && last_use != kKeep)
      free_after[static_cast<size_t>(last_use)].push_back(b);
  }

  for (ir::ValueId id : graph.inputs()) {
    Buffer& buffer = buffers[buffer_of[static_cast<size_t>(id)]];
    if (buffer.last_use == kBeforeNodes) continue;  // read by no node
    const std::span<const std::byte> bytes = inputs.find(graph.value(id).name)->second;
    RETURN_IF_ERROR(buffers.Allocate(buffer));
    RETURN_IF_ERROR(backend.Upload(buffer.data, bytes.data(), buffer.bytes));
  }

  const auto start = std::chrono::steady_clock::now();
  std::vector<TensorRef> input_refs;
  std::vector<TensorRef> output_refs;
  for (size_t position = 0; position < order.size(); ++position) {
    const ir::Node& node = graph.node(order[position]);
    input_refs.clear();
    output_refs.clear();
    for (ir::ValueId input : node.inputs) {
      input_refs.push_back(
          {&graph.value(input).type, buffers[buffer_of[static_cast<size_t>(input)]].data});
    }
    for (ir::ValueId output : node.outputs) {
      Buffer& buffer = buffers[buffer_of[static_cast<size_t>(output)]];
      if (buffer.data == nullptr) RETURN_IF_ERROR(buffers.Allocate(buffer));
      output_refs.push_back({&graph.value(output).type, buffer.data});
    }
    const backends::KernelCall call{node, input_refs, output_refs,
                                    backends::KernelContext{options.step}};
    if (const absl::Status status = backend.RunKernel(program::Stream::kCompute, call);
        !status.ok()) {
      return absl::Status(status.code(), fmt::format("node '{}' ({}): {}", node.name,
                                                     ir::OpName(node.op), StatusMessage(status)));
    }
    RETURN_IF_ERROR(backend.SynchronizeStream(program::Stream::kCompute));
    for (size_t b : free_after[position]) buffers.Free(buffers[b]);
  }

  ForwardResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (ir::ValueId id : graph.outputs()) {
    const Buffer& buffer = buffers[buffer_of[static_cast<size_t>(id)]];
    std::vector<std::byte>& bytes = result.outputs.emplace_back(static_cast<size_t>(buffer.bytes));
    RETURN_IF_ERROR(backend.Download(bytes.data(), buffer.data, buffer.bytes));
  }
  result.peak_device_bytes = buffers.peak();
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
