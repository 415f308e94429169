// `spillway export`: the trained parameters and batch-norm running statistics
// of a checkpoint, written back into the ONNX model they were trained from, in
// its layouts and under its names; everything else in the model stays as it
// was (onnx/exporter.h, docs/onnx.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"
#include "train/checkpoint.h"

namespace spillway::cli {
namespace {

struct ExportFlags {
  WorkloadFlags workload;
  std::string checkpoint;
  std::string out;
};

// The checkpoint's value of every parameter and buffer of the model, by name:
// all of them must be there, with the model's types (so a checkpoint of
// another model, or of the same file imported with other shapes, is refused).
absl::StatusOr<std::map<std::string, std::vector<std::byte>>> TrainedValues(
    const ir::Graph& graph, const train::Checkpoint& checkpoint, const std::string& path) {
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
  return values;
}

absl::Status RunExportCommand(std::ostream& out, const ExportFlags& flags) {
  if (flags.workload.onnx.empty()) {
    return absl::InvalidArgumentError(
        "export needs --onnx: it writes the trained values back into the model they came from");
  }
  RETURN_IF_ERROR(CheckOutputPath(flags.out, "exported model"));
  ASSIGN_OR_RETURN(const Workload workload, BuildWorkload(flags.workload, WorkloadOutputs::kAny));
  ASSIGN_OR_RETURN(const train::Checkpoint checkpoint, train::ReadCheckpoint(flags.checkpoint));
  ASSIGN_OR_RETURN(const auto values, TrainedValues(workload.graph, checkpoint, flags.checkpoint));
  ASSIGN_OR_RETURN(const std::string model,
                   ReadFileToString(flags.workload.onnx, onnx::kMaxOnnxFileBytes, "ONNX file"));
  ASSIGN_OR_RETURN(const std::string exported,
                   onnx::ExportTrainedValues(model, workload.ohwi_initializers, values));
  RETURN_IF_ERROR(WriteFileAtomically(flags.out, exported, "exported model"));
  int64_t elements = 0;
  for (const auto& [name, bytes] : values) elements += static_cast<int64_t>(bytes.size() / 4);
  fmt::print(out, "Exported {} tensors ({} values) from '{}' (step {}) into '{}'\n", values.size(),
             FormatCount(static_cast<double>(elements)), flags.checkpoint, checkpoint.step,
             flags.out);
  return absl::OkStatus();
}

}  // namespace

CommandRunner AddExportCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a checkpoint's trained parameters and running statistics back into the ONNX model "
      "they were trained from (same --onnx, --input-shape, --batch, --loss and --freeze as "
      "train)");
  auto flags = std::make_shared<ExportFlags>();
  AddWorkloadFlags(*command, flags->workload);
  command->add_option("--checkpoint", flags->checkpoint, "Checkpoint written by train --save")
      ->required()
      ->check(NotEmpty());
  command->add_option("--out", flags->out, "The ONNX file to write")->required()->check(NotEmpty());
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    return RunExportCommand(out, *flags);
  };
}

}  // namespace spillway::cli
