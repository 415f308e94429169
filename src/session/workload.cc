#include "session/workload.h"

#include "fmt/format.h"
#include "models/models.h"
#include "onnx/importer.h"
#include "session/option_flags.h"
#include "support/status_macros.h"

namespace spillway::session {

namespace {

absl::StatusOr<Workload> ImportWorkload(const WorkloadSpec& spec, WorkloadOutputs outputs) {
  if (spec.image || spec.height || spec.width) {
    return absl::InvalidArgumentError(
        "with --onnx, give image sizes with --input-shape NAME=NxCxHxW instead of "
        "--image/--height/--width");
  }
  // An ONNX model's sizes come from its file: of the model options, only
  // --batch and --seed reach it.
  for (const models::GivenOption& given : spec.given) {
    if (given.field != "batch") {
      return absl::InvalidArgumentError(fmt::format(
          "{} does not apply to an ONNX model (its sizes come from the file); with --onnx, "
          "the model options are --batch, --input-shape and --seed",
          given.spelt));
    }
  }
  onnx::ImportOptions options;
  for (const std::string& text : spec.input_shapes) {
    ASSIGN_OR_RETURN(auto input_shape, onnx::ParseInputShape(text));
    options.input_shapes[input_shape.first] = std::move(input_shape.second);
  }
  options.batch = spec.batch;
  if (spec.loss == "cross-entropy") options.loss = onnx::LossKind::kCrossEntropy;
  options.first_seed = spec.options.seed;
  options.frozen = spec.frozen;
  ASSIGN_OR_RETURN(onnx::ImportedModel model, onnx::ImportModelFile(spec.onnx, options));
  const ir::Graph& graph = model.graph;
  RETURN_IF_ERROR(ir::CheckGraphSize(graph));
  if (outputs == WorkloadOutputs::kScalarLoss && options.loss == onnx::LossKind::kNone &&
      (graph.outputs().size() != 1 || graph.value(graph.outputs()[0]).type.rank() != 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the model's output is not a scalar loss; add one with --loss cross-entropy",
        spec.onnx));
  }
  return Workload{std::move(model.graph), std::move(model.initial_values),
                  std::move(model.output_names), std::move(model.ohwi_initializers)};
}

}  // namespace

absl::StatusOr<nodelink::CostedGraph> LoadGraphFile(const WorkloadSpec& spec) {
  if (!spec.model.empty() || !spec.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model, --onnx and --graph");
  }
  if (!spec.input_shapes.empty() || !spec.loss.empty() || !spec.frozen.empty()) {
    return absl::InvalidArgumentError("--input-shape, --loss and --freeze go with --onnx");
  }
  if (!spec.given.empty() || spec.image || spec.height || spec.width) {
    const std::string spelt = !spec.given.empty() ? spec.given.front().spelt
                              : spec.image        ? "--image"
                              : spec.height       ? "--height"
                                                  : "--width";
    return absl::InvalidArgumentError(fmt::format(
        "{} does not apply to --graph: the file gives every node's size and duration", spelt));
  }
  return nodelink::LoadNodeLinkGraph(spec.graph, spec.graph_options);
}

absl::StatusOr<Workload> BuildWorkload(WorkloadSpec spec, WorkloadOutputs outputs) {
  if (!spec.graph.empty()) {
    return absl::InvalidArgumentError(
        "--graph gives a graph to plan, not to run: use it with `spillway plan`, `compare` or "
        "`inspect`");
  }
  if (spec.model.empty() == spec.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model and --onnx");
  }
  if (!spec.onnx.empty()) return ImportWorkload(spec, outputs);
  if (!spec.input_shapes.empty() || !spec.loss.empty() || !spec.frozen.empty()) {
    return absl::InvalidArgumentError("--input-shape, --loss and --freeze go with --onnx");
  }
  RETURN_IF_ERROR(models::CheckOptionsApply(spec.model, spec.given, [](std::string_view name) {
    return std::string(ModelOptionFlag(name));
  }));
  if (spec.image && (spec.height || spec.width)) {
    return absl::InvalidArgumentError("give either --image or --height/--width, not both");
  }
  if (spec.image) {
    spec.options.height = *spec.image;
    spec.options.width = *spec.image;
  }
  if (spec.height) spec.options.height = *spec.height;
  if (spec.width) spec.options.width = *spec.width;
  if (spec.batch) spec.options.batch = *spec.batch;
  ASSIGN_OR_RETURN(ir::Graph graph, models::BuildModel(spec.model, spec.options));
  RETURN_IF_ERROR(ir::CheckGraphSize(graph));
  return Workload{std::move(graph), {}, {}, {}};
}

std::string DescribeWorkload(const WorkloadSpec& spec) {
  const models::ModelOptions& o = spec.options;
  const int64_t batch = spec.batch.value_or(o.batch);
  if (!spec.graph.empty()) return fmt::format("{} (node-link graph)", spec.graph);
  if (!spec.onnx.empty()) {
    std::string text = fmt::format("{} (ONNX)", spec.onnx);
    for (const std::string& shape : spec.input_shapes) text += ", " + shape;
    if (spec.batch) text += fmt::format(", batch {}", *spec.batch);
    return text;
  }
  if (spec.model == "gpt2") {
    return fmt::format("gpt2, batch {}, {} layers, {} heads, d_model {}, sequence {}", batch,
                       o.n_layer, o.n_head, o.d_model, o.seq_len);
  }
  const int64_t height = spec.image ? *spec.image : spec.height.value_or(o.height);
  const int64_t width = spec.image ? *spec.image : spec.width.value_or(o.width);
  return fmt::format("{}, batch {}, {}x{}", spec.model, batch, height, width);
}

}  // namespace spillway::session
