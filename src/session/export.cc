#include "session/export.h"

#include <map>
#include <vector>

#include "fmt/format.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "train/checkpoint.h"

namespace spillway::session {

absl::StatusOr<std::map<std::string, std::vector<std::byte>>> CheckpointValues(
    const ir::Graph& graph, const std::string& path, int64_t* step) {
  ASSIGN_OR_RETURN(const train::Checkpoint checkpoint, train::ReadCheckpoint(path));
  std::map<std::string, const train::CheckpointTensor*> saved;
  for (const train::CheckpointTensor& tensor : checkpoint.tensors) saved[tensor.name] = &tensor;
  std::map<std::string, std::vector<std::byte>> values;
  for (ir::ValueId id : graph.inputs()) {
    const ir::Value& value = graph.value(id);
    if (value.kind != ir::ValueKind::kParameter && value.kind != ir::ValueKind::kBuffer) continue;
    const auto it = saved.find(value.name);
    if (it == saved.end()) {
      return absl::InvalidArgumentError(fmt::format(
          "checkpoint '{}' has no tensor '{}': it was saved from another model", path, value.name));
    }
    if (it->second->type.shape != value.type.shape || it->second->type.dtype != value.type.dtype) {
      return absl::InvalidArgumentError(fmt::format(
          "checkpoint '{}' holds '{}' as {}, but the model has {}: it was saved from another "
          "model, or from this one with other --input-shape, --batch or --freeze",
          path, value.name, ir::TypeToString(it->second->type), ir::TypeToString(value.type)));
    }
    values[value.name] = it->second->bytes;
  }
  if (step != nullptr) *step = checkpoint.step;
  return values;
}

absl::StatusOr<ExportSummary> ExportToOnnx(const WorkloadSpec& spec,
                                           const std::string& checkpoint_path,
                                           const std::string& out) {
  if (spec.onnx.empty()) {
    return absl::InvalidArgumentError(
        "export needs --onnx: it writes the trained values back into the model they came from");
  }
  RETURN_IF_ERROR(CheckOutputPath(out, "exported model"));
  ASSIGN_OR_RETURN(const Workload workload, BuildWorkload(spec, WorkloadOutputs::kAny));
  ExportSummary summary;
  ASSIGN_OR_RETURN(const auto values,
                   CheckpointValues(workload.graph, checkpoint_path, &summary.step));
  ASSIGN_OR_RETURN(const std::string model,
                   ReadFileToString(spec.onnx, onnx::kMaxOnnxFileBytes, "ONNX file"));
  ASSIGN_OR_RETURN(const std::string exported,
                   onnx::ExportTrainedValues(model, workload.ohwi_initializers, values));
  RETURN_IF_ERROR(WriteFileAtomically(out, exported, "exported model"));
  summary.tensors = static_cast<int64_t>(values.size());
  for (const auto& [name, bytes] : values) {
    summary.elements += static_cast<int64_t>(bytes.size() / sizeof(float));
  }
  return summary;
}

}  // namespace spillway::session
