#include "cli/workload_flags.h"

#include "cli/model_option_flags.h"
#include "cli/option_validators.h"
#include "fmt/format.h"
#include "models/models.h"
#include "onnx/importer.h"
#include "support/status_macros.h"

namespace spillway::cli {

namespace {

// Records each value CLI11 parses for `option` (it never calls this for a
// default) as a given model option that sets `field`.
CLI::Option* Given(CLI::Option* option, WorkloadFlags& flags, std::string field) {
  return option->each([&flags, field, spelt = option->get_name()](const std::string&) {
    flags.given.push_back({field, spelt});
  });
}

}  // namespace

void AddWorkloadFlags(CLI::App& command, WorkloadFlags& flags, GraphFiles graph_files) {
  models::ModelOptions& o = flags.options;
  command.add_option("--model", flags.model, "Built-in model (see `spillway models`)")
      ->check(NotEmpty());
  if (graph_files == GraphFiles::kRefused) {
    // Present so that a graph file given here gets a message saying where it goes.
    command
        .add_option("--graph", flags.graph,
                    "Graph with its own costs: `plan`, `compare` and `inspect` only")
        ->check(NotEmpty());
  } else {
    command
        .add_option("--graph", flags.graph,
                    "Node-link JSON graph with per-node durations and output sizes instead of "
                    "--model: inspected, planned and simulated, never run (docs/graph-files.md)")
        ->check(NotEmpty());
    command
        .add_option("--graph-duration", flags.graph_options.duration_attr,
                    "--graph: the node attribute holding its duration (default: the file's "
                    "'duration_attr', else \"duration\")")
        ->check(NotEmpty());
    command
        .add_option("--graph-size", flags.graph_options.size_attr,
                    "--graph: the node attribute holding its output's bytes (default: the "
                    "file's 'size_attr', else \"size\")")
        ->check(NotEmpty());
    command
        .add_option("--graph-time-unit", flags.graph_options.time_unit,
                    "--graph: unit of the durations (default: the file's 'time_unit', else s)")
        ->check(CLI::IsMember({"s", "ms", "us"}));
  }
  command
      .add_option("--onnx", flags.onnx,
                  "ONNX model file instead of --model; its input shapes come from the file, "
                  "--input-shape and --batch (docs/onnx.md)")
      ->check(NotEmpty());
  command
      .add_option("--input-shape", flags.input_shapes,
                  "--onnx: shape of an input in ONNX order, NAME=1x3x224x224 (repeatable)")
      ->check(NotEmpty());
  command.add_option("--loss", flags.loss, "--onnx: loss over the model's output")
      ->check(CLI::IsMember({"cross-entropy"}));
  command
      .add_option("--freeze", flags.frozen,
                  "--onnx: do not train the initializers whose names start with this prefix "
                  "(repeatable), e.g. a backbone's")
      ->check(NotEmpty());
  Given(command
            .add_option("--batch", flags.batch,
                        "Batch size (default 1; with --onnx, the first dimension of every input)")
            ->check(PositiveInteger()),
        flags, "batch");
  Given(command.add_option("--image", flags.image, "Square image size: height and width in pixels")
            ->check(PositiveInteger()),
        flags, "height");
  Given(command.add_option("--height", flags.height, "Image height in pixels (default 224)")
            ->check(PositiveInteger()),
        flags, "height");
  Given(command.add_option("--width", flags.width, "Image width in pixels (default 224)")
            ->check(PositiveInteger()),
        flags, "width");
  Given(command
            .add_option("--classes", o.classes,
                        "Output classes (default: 1000 for classifiers, 21 for deeplabv3plus, "
                        "2 for unet)")
            ->check(PositiveInteger()),
        flags, "classes");
  Given(command.add_option("--in-channels", o.in_channels, "Input image channels")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "in_channels");
  Given(command
            .add_option("--base-width", o.base_width, "Channels of the first stage (resnet*, unet)")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "base_width");
  Given(
      command.add_option("--backbone", o.backbone, "deeplabv3plus backbone: resnet50 or resnet101")
          ->check(CLI::IsMember({"resnet50", "resnet101"}))
          ->capture_default_str(),
      flags, "backbone");
  Given(command.add_option("--depth", o.depth, "unet: number of 2x2 downsamplings")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "depth");
  Given(command
            .add_option(
                "--dropout", o.dropout,
                "Dropout probability (default: 0.5 for vgg16 and deeplabv3plus, 0.1 for gpt2)")
            ->check(Number(kFraction)),
        flags, "dropout");
  // Never refused as not applying: train and forward initialize and feed
  // every model from it.
  command.add_option("--seed", o.seed, "Seed of the first dropout mask")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  Given(command.add_option("--layers", o.n_layer, "gpt2: transformer blocks")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "n_layer");
  Given(command.add_option("--heads", o.n_head, "gpt2: attention heads")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "n_head");
  Given(command.add_option("--d-model", o.d_model, "gpt2: model width")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "d_model");
  Given(command.add_option("--seq-len", o.seq_len, "gpt2: sequence length")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "seq_len");
  Given(command.add_option("--vocab", o.vocab, "gpt2: vocabulary size")
            ->check(PositiveInteger())
            ->capture_default_str(),
        flags, "vocab");
}

namespace {

absl::StatusOr<Workload> ImportWorkload(const WorkloadFlags& flags, WorkloadOutputs outputs) {
  if (flags.image || flags.height || flags.width) {
    return absl::InvalidArgumentError(
        "with --onnx, give image sizes with --input-shape NAME=NxCxHxW instead of "
        "--image/--height/--width");
  }
  // An ONNX model's sizes come from its file: of the model options, only
  // --batch and --seed reach it.
  for (const models::GivenOption& given : flags.given) {
    if (given.field != "batch") {
      return absl::InvalidArgumentError(fmt::format(
          "{} does not apply to an ONNX model (its sizes come from the file); with --onnx, "
          "the model options are --batch, --input-shape and --seed",
          given.spelt));
    }
  }
  onnx::ImportOptions options;
  for (const std::string& text : flags.input_shapes) {
    ASSIGN_OR_RETURN(auto input_shape, onnx::ParseInputShape(text));
    options.input_shapes[input_shape.first] = std::move(input_shape.second);
  }
  options.batch = flags.batch;
  if (flags.loss == "cross-entropy") options.loss = onnx::LossKind::kCrossEntropy;
  options.first_seed = flags.options.seed;
  options.frozen = flags.frozen;
  ASSIGN_OR_RETURN(onnx::ImportedModel model, onnx::ImportModelFile(flags.onnx, options));
  const ir::Graph& graph = model.graph;
  RETURN_IF_ERROR(ir::CheckGraphSize(graph));
  if (outputs == WorkloadOutputs::kScalarLoss && options.loss == onnx::LossKind::kNone &&
      (graph.outputs().size() != 1 || graph.value(graph.outputs()[0]).type.rank() != 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the model's output is not a scalar loss; add one with --loss cross-entropy",
        flags.onnx));
  }
  return Workload{std::move(model.graph), std::move(model.initial_values),
                  std::move(model.output_names), std::move(model.ohwi_initializers)};
}

}  // namespace

absl::StatusOr<nodelink::CostedGraph> LoadGraphFile(const WorkloadFlags& flags) {
  if (!flags.model.empty() || !flags.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model, --onnx and --graph");
  }
  if (!flags.input_shapes.empty() || !flags.loss.empty() || !flags.frozen.empty()) {
    return absl::InvalidArgumentError("--input-shape, --loss and --freeze go with --onnx");
  }
  if (!flags.given.empty() || flags.image || flags.height || flags.width) {
    const std::string spelt = !flags.given.empty() ? flags.given.front().spelt
                              : flags.image        ? "--image"
                              : flags.height       ? "--height"
                                                   : "--width";
    return absl::InvalidArgumentError(fmt::format(
        "{} does not apply to --graph: the file gives every node's size and duration", spelt));
  }
  return nodelink::LoadNodeLinkGraph(flags.graph, flags.graph_options);
}

absl::StatusOr<Workload> BuildWorkload(WorkloadFlags flags, WorkloadOutputs outputs) {
  if (!flags.graph.empty()) {
    return absl::InvalidArgumentError(
        "--graph gives a graph to plan, not to run: use it with `spillway plan`, `compare` or "
        "`inspect`");
  }
  if (flags.model.empty() == flags.onnx.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model and --onnx");
  }
  if (!flags.onnx.empty()) return ImportWorkload(flags, outputs);
  if (!flags.input_shapes.empty() || !flags.loss.empty() || !flags.frozen.empty()) {
    return absl::InvalidArgumentError("--input-shape, --loss and --freeze go with --onnx");
  }
  RETURN_IF_ERROR(models::CheckOptionsApply(flags.model, flags.given, [](std::string_view name) {
    return std::string(ModelOptionFlag(name));
  }));
  if (flags.image && (flags.height || flags.width)) {
    return absl::InvalidArgumentError("give either --image or --height/--width, not both");
  }
  if (flags.image) {
    flags.options.height = *flags.image;
    flags.options.width = *flags.image;
  }
  if (flags.height) flags.options.height = *flags.height;
  if (flags.width) flags.options.width = *flags.width;
  if (flags.batch) flags.options.batch = *flags.batch;
  ASSIGN_OR_RETURN(ir::Graph graph, models::BuildModel(flags.model, flags.options));
  RETURN_IF_ERROR(ir::CheckGraphSize(graph));
  return Workload{std::move(graph), {}, {}, {}};
}

void AddPlannerFlags(CLI::App& command, planner::PlannerOptions& options) {
  command
      .add_option("--time-limit", options.time_limit_s,
                  "Safety net: seconds after which the hybrid planner stops refining even if "
                  "it has not converged (the output then says so); meant never to be reached")
      ->check(Number(kPositiveNumber))
      ->capture_default_str();
  command
      .add_option(
          "--max-evaluations", options.max_evaluations,
          "Stop each of the hybrid planner's refinements after this many candidate plans (0: "
          "no cap); either way the plan is the same on every "
          "machine")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  command
      .add_option("--plan-threads", options.threads,
                  "Threads that evaluate the hybrid planner's candidate plans side by side (0: "
                  "this machine's, at most 8); the plan is the same with any number")
      ->check(Integer(0, 1024))
      ->capture_default_str();
  command
      .add_option("--refine-passes", options.max_refine_passes,
                  "Passes of the hybrid planner's refinement moves, each pass trying every move "
                  "once, until a pass improves nothing (0: no limit, full convergence; slower on "
                  "large graphs)")
      ->check(NonNegativeInteger())
      ->capture_default_str();
}

std::string DescribeWorkload(const WorkloadFlags& flags) {
  const models::ModelOptions& o = flags.options;
  const int64_t batch = flags.batch.value_or(o.batch);
  if (!flags.graph.empty()) return fmt::format("{} (node-link graph)", flags.graph);
  if (!flags.onnx.empty()) {
    std::string text = fmt::format("{} (ONNX)", flags.onnx);
    for (const std::string& shape : flags.input_shapes) text += ", " + shape;
    if (flags.batch) text += fmt::format(", batch {}", *flags.batch);
    return text;
  }
  if (flags.model == "gpt2") {
    return fmt::format("gpt2, batch {}, {} layers, {} heads, d_model {}, sequence {}", batch,
                       o.n_layer, o.n_head, o.d_model, o.seq_len);
  }
  const int64_t height = flags.image ? *flags.image : flags.height.value_or(o.height);
  const int64_t width = flags.image ? *flags.image : flags.width.value_or(o.width);
  return fmt::format("{}, batch {}, {}x{}", flags.model, batch, height, width);
}

}  // namespace spillway::cli
