#include "onnx/fuzz/import_check.h"

#include <climits>
#include <optional>
#include <string>
#include <utility>

#include "fmt/format.h"
#include "ir/verifier.h"
#include "onnx/onnx_pb.h"
#include "support/status_macros.h"

namespace spillway::onnx::fuzz {
namespace {

// Larger dimensions are kept as they are: doubling them could overflow.
constexpr int64_t kMaxDoubledDim = int64_t{1} << 20;

// The --input-shape variant: the file's first non-initializer input with the
// batch (and the spatial extent of an NCHW image) doubled and unknown
// dimensions set to 1.
std::optional<std::pair<std::string, ir::Shape>> LargerInputShape(std::string_view bytes) {
  ::onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return std::nullopt;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  for (const ::onnx::ValueInfoProto& input : model.graph().input()) {
    bool initializer = false;
    for (const ::onnx::TensorProto& init : model.graph().initializer()) {
      initializer = initializer || init.name() == input.name();
    }
    if (initializer) continue;
    const ::onnx::TensorShapeProto& dims = input.type().tensor_type().shape();
    ir::Shape shape;
    for (int i = 0; i < dims.dim_size(); ++i) {
      int64_t d = dims.dim(i).has_dim_value() ? dims.dim(i).dim_value() : 1;
      const bool doubled = i == 0 || (dims.dim_size() == 4 && i >= 2);
      if (doubled && d > 0 && d <= kMaxDoubledDim) d *= 2;
      shape.push_back(d);
    }
    return std::make_pair(input.name(), std::move(shape));
  }
  return std::nullopt;
}

absl::Status Broken(std::string_view what) {
  return absl::InternalError(fmt::format("imported model breaks an invariant: {}", what));
}

}  // namespace

std::vector<ImportOptions> OptionVariants(std::string_view bytes) {
  std::vector<ImportOptions> variants(2);
  variants[1].loss = LossKind::kCrossEntropy;
  if (std::optional<std::pair<std::string, ir::Shape>> input = LargerInputShape(bytes)) {
    ImportOptions& larger = variants.emplace_back();
    larger.input_shapes.insert(*std::move(input));
  }
  return variants;
}

absl::StatusOr<bool> ImportAndCheck(std::string_view bytes, const ImportOptions& options) {
  absl::StatusOr<ImportedModel> imported = ImportModel(bytes, options);
  if (!imported.ok()) return false;
  const ir::Graph& graph = imported->graph;
  if (absl::Status verified = ir::VerifyGraph(graph); !verified.ok()) {
    return Broken(StatusMessage(verified));
  }
  size_t with_values = 0;
  for (ir::ValueId id : graph.inputs()) {
    const ir::Value& value = graph.value(id);
    if (value.kind != ir::ValueKind::kParameter && value.kind != ir::ValueKind::kBuffer) continue;
    ++with_values;
    auto it = imported->initial_values.find(value.name);
    if (it == imported->initial_values.end()) {
      return Broken(fmt::format("'{}' has no initial value", value.name));
    }
    if (static_cast<int64_t>(it->second.size()) != value.type.bytes()) {
      return Broken(fmt::format("the initial value of '{}' {} has {} bytes", value.name,
                                ir::TypeToString(value.type), it->second.size()));
    }
  }
  if (with_values != imported->initial_values.size()) {
    return Broken(fmt::format("{} initial values for {} parameters and buffers",
                              imported->initial_values.size(), with_values));
  }
  if (options.loss == LossKind::kCrossEntropy &&
      (graph.outputs().size() != 1 || graph.value(graph.outputs()[0]).type != ir::F32({}))) {
    return Broken("the loss is not the single f32 scalar output");
  }
  return true;
}

}  // namespace spillway::onnx::fuzz
