// `spillway export`: the trained parameters and batch-norm running statistics
// of a checkpoint, written back into the ONNX model they were trained from, in
// its layouts and under its names; everything else in the model stays as it
// was (session/export.h, docs/onnx.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "session/export.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::cli {
namespace {

struct ExportFlags {
  WorkloadFlags workload;
  std::string checkpoint;
  std::string out;
};

absl::Status RunExportCommand(std::ostream& out, const ExportFlags& flags) {
  ASSIGN_OR_RETURN(const session::ExportSummary summary,
                   session::ExportToOnnx(flags.workload, flags.checkpoint, flags.out));
  fmt::print(out, "Exported {} tensors ({} values) from '{}' (step {}) into '{}'\n",
             summary.tensors, FormatCount(static_cast<double>(summary.elements)), flags.checkpoint,
             summary.step, flags.out);
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
