// `spillway forward`: run a model's forward graph once on the CPU, with inputs
// from .npy files or the seed, and write or summarize its outputs: the check
// that an imported model computes what the framework it came from computes
// (docs/onnx.md).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "fmt/ranges.h"
#include "nlohmann/json.hpp"
#include "runtime/forward.h"
#include "session/forward.h"
#include "support/file_io.h"
#include "support/npy.h"
#include "support/status_macros.h"
#include "support/units.h"
#include "train/initializer.h"

namespace spillway::cli {
namespace {

struct ForwardFlags {
  WorkloadFlags workload;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string output_dir;
  std::string checkpoint;  // parameters and buffers from here instead
  BackendFlags backend;
  bool json = false;
};

struct OutputSummary {
  std::string name;
  ir::Shape shape;  // ONNX order
  ir::DType dtype = ir::DType::kF32;
  double mean = 0;
  double min = 0;
  double max = 0;
  std::string file;  // empty without --output-dir
};

OutputSummary Summarize(std::string name, const ir::Value& value,
                        std::span<const std::byte> bytes) {
  OutputSummary s;
  s.name = std::move(name);
  s.shape = runtime::FrameworkShape(value.type);
  s.dtype = value.type.dtype;
  const size_t count = static_cast<size_t>(*ir::NumElements(value.type.shape));
  if (count == 0) return s;
  auto element = [&](size_t i) -> double {
    if (value.type.dtype == ir::DType::kI64) {
      int64_t v;
      std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
      return static_cast<double>(v);
    }
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
    return v;
  };
  double sum = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < count; ++i) {
    const double v = element(i);
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean = sum / static_cast<double>(count);
  return s;
}

// A file name for a value name: ONNX names may hold '/' and ':'.
std::string FileName(std::string_view name) {
  std::string file(name);
  for (char& c : file) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return file + ".npy";
}

// An ONNX model's outputs go by the file's names, a built-in model's by value names.
const std::string& OutputName(const session::Workload& workload, size_t i) {
  return workload.output_names.empty() ? workload.graph.value(workload.graph.outputs()[i]).name
                                       : workload.output_names[i];
}

absl::Status RunForwardCommand(std::ostream& out, const ForwardFlags& flags) {
  ASSIGN_OR_RETURN(session::Workload workload,
                   session::BuildWorkload(flags.workload, session::WorkloadOutputs::kAny));
  const ir::Graph& graph = workload.graph;
  RETURN_IF_ERROR(train::CheckStateFitsHost(graph));
  ASSIGN_OR_RETURN(const auto inputs,
                   session::GatherInputs(graph, flags.inputs, flags.workload.options.seed));
  ASSIGN_OR_RETURN(const auto model_values,
                   session::ModelValues(workload, flags.workload, flags.checkpoint));
  runtime::ForwardInputs bytes;
  for (const auto& [name, input] : inputs) bytes.emplace(name, input.bytes);
  for (const auto& [name, value] : model_values) bytes.emplace(name, value);
  // Every output file is checked before the model runs, and all of them are
  // written together once it has: a failure leaves none.
  std::vector<std::string> files(graph.outputs().size());
  if (!flags.output_dir.empty()) {
    std::error_code error;
    if (std::filesystem::exists(flags.output_dir, error) &&
        !std::filesystem::is_directory(flags.output_dir, error)) {
      return absl::InvalidArgumentError(
          fmt::format("--output-dir '{}' exists and is not a directory", flags.output_dir));
    }
    // The directory is created after the run; what must exist now is a
    // writable directory to create it in.
    std::filesystem::path existing = flags.output_dir;
    while (!existing.empty() && !std::filesystem::exists(existing, error)) {
      existing = existing.parent_path();
    }
    RETURN_IF_ERROR(CheckOutputPath((existing / "output.npy").string(), "--output-dir"));
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      const ir::Value& value = graph.value(graph.outputs()[i]);
      const std::string& name = OutputName(workload, i);
      if (!session::NpyTypeOf(value.type.dtype)) {
        return absl::InvalidArgumentError(
            fmt::format("output '{}' is {}; only f32 and i64 outputs can be written", name,
                        ir::DTypeName(value.type.dtype)));
      }
      files[i] = (std::filesystem::path(flags.output_dir) / FileName(name)).string();
      for (size_t j = 0; j < i; ++j) {
        if (files[j] == files[i]) {
          return absl::InvalidArgumentError(
              fmt::format("outputs '{}' and '{}' would both be written to '{}'",
                          OutputName(workload, j), name, files[i]));
        }
      }
    }
  }

  ASSIGN_OR_RETURN(const std::unique_ptr<backends::Backend> backend,
                   session::MakeBackend(flags.backend));
  ASSIGN_OR_RETURN(const runtime::ForwardResult result,
                   runtime::RunForward(graph, *backend, bytes));

  std::vector<OutputSummary> outputs;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ir::Value& value = graph.value(graph.outputs()[i]);
    outputs.push_back(Summarize(OutputName(workload, i), value, result.outputs[i]));
    outputs.back().file = files[i];
  }
  if (!flags.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(flags.output_dir, error);
    if (error) {
      return absl::InvalidArgumentError(
          fmt::format("cannot create --output-dir '{}': {}", flags.output_dir, error.message()));
    }
    OutputFiles written;
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      const ir::Value& value = graph.value(graph.outputs()[i]);
      RETURN_IF_ERROR(
          written.Add(files[i],
                      SerializeNpy(*session::NpyTypeOf(value.type.dtype), outputs[i].shape,
                                   runtime::ToFrameworkOrder(value.type, result.outputs[i])),
                      "output"));
    }
    RETURN_IF_ERROR(written.Commit());
  }

  // Counted as `spillway inspect` counts them: the elements of every parameter.
  int64_t parameters = 0;
  for (ir::ValueId id : graph.InputsOfKind(ir::ValueKind::kParameter)) {
    parameters += *ir::NumElements(graph.value(id).type.shape);
  }
  if (flags.json) {
    nlohmann::ordered_json json = {
        {"workload", session::DescribeWorkload(flags.workload)},
        {"parameters", parameters},
    };
    json.update(session::BackendToJson(flags.backend));
    json.update(nlohmann::ordered_json{
        {"seconds", result.seconds},
        {"peak_device_bytes", result.peak_device_bytes},
    });
    nlohmann::ordered_json& input_json = json["inputs"] = nlohmann::ordered_json::array();
    for (const auto& [name, input] : inputs) {
      input_json.push_back({{"name", name}, {"source", input.source}});
    }
    nlohmann::ordered_json& output_json = json["outputs"] = nlohmann::ordered_json::array();
    for (const OutputSummary& s : outputs) {
      output_json.push_back({{"name", s.name},
                             {"shape", s.shape},
                             {"dtype", std::string(ir::DTypeName(s.dtype))},
                             {"mean", s.mean},
                             {"min", s.min},
                             {"max", s.max},
                             {"file", s.file.empty() ? nlohmann::ordered_json(nullptr)
                                                     : nlohmann::ordered_json(s.file)}});
    }
    out << json.dump(2) << "\n";
    return absl::OkStatus();
  }
  fmt::print(out, "Workload   {}, {} parameters\n", session::DescribeWorkload(flags.workload),
             FormatCount(static_cast<double>(parameters)));
  for (const auto& [name, input] : inputs) {
    fmt::print(out, "Input      {}: {}{}\n", name, input.source,
               input.source.starts_with("seed ") ? " (uniform values; give it with --input)" : "");
  }
  fmt::print(out, "Ran        {} nodes on {} in {:.3f} s, peak device memory {}\n",
             graph.num_nodes(), session::DescribeBackend(flags.backend), result.seconds,
             FormatBytes(result.peak_device_bytes));
  for (const OutputSummary& s : outputs) {
    fmt::print(out, "Output     {} {} {}: mean {:.6g}, min {:.6g}, max {:.6g}{}\n", s.name,
               ir::ShapeToString(s.shape), ir::DTypeName(s.dtype), s.mean, s.min, s.max,
               s.file.empty() ? "" : fmt::format(" -> {}", s.file));
  }
  return absl::OkStatus();
}

}  // namespace

CommandRunner AddForwardCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "forward",
      "Run a model's forward pass once on the CPU and write or summarize its outputs: checks "
      "that an imported ONNX model computes what its framework computes");
  auto flags = std::make_shared<ForwardFlags>();
  AddWorkloadFlags(*command, flags->workload);
  command->get_option("--seed")->description(
      "Seed of the inputs not given with --input, of a built-in model's parameters and of the "
      "dropout masks");
  command
      ->add_option("--input", flags->inputs,
                   "An input's values: NAME=FILE.npy, float32 or int64 in ONNX order (NCHW "
                   "for images) (repeatable); inputs not given are uniform from --seed")
      ->check(NotEmpty());
  command
      ->add_option("--output-dir", flags->output_dir,
                   "Write each output as DIR/<name>.npy, in ONNX order")
      ->check(NotEmpty());
  command
      ->add_option("--checkpoint", flags->checkpoint,
                   "Take the parameters and batch-norm statistics from a checkpoint of this model "
                   "(train --save) instead of the ONNX file or the seed")
      ->check(NotEmpty());
  AddBackendFlags(*command, flags->backend);
  command->add_flag("--json", flags->json,
                    "Print the parameter count, the inputs' sources and each output's name, shape "
                    "(ONNX order), dtype, mean, min, max and file as JSON");
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    return RunForwardCommand(out, *flags);
  };
}

}  // namespace spillway::cli
