#include "cli/workload_flags.h"

#include <string>

#include "cli/option_validators.h"
#include "fmt/format.h"

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

void AddPlannerFlags(CLI::App& command, planner::PlannerOptions& options) {
  command
      .add_option_function<std::string>(
          "--backward-order",
          // "auto" leaves the choice open; "each" too, for all but hybrid.
          [&options](const std::string& order) {
            options.backward_order = program::ParseBackwardOrder(order);
            options.every_backward_order = order == "each";
          },
          "Order of the backward pass: memory-aware (reordered within its dependencies to hold "
          "fewer bytes at once), lookahead (the same, looking two nodes ahead: the least memory "
          "where tensors are fetched twice), topological (as autodiff emitted it), auto "
          "(memory-aware where it lowers the least memory a plan can reach, lookahead where only "
          "it reaches the budget) or each (hybrid plans in every order and keeps the fastest "
          "plan, taking that much longer; the other policies plan in auto's); results are "
          "bitwise the same")
      ->check(CLI::IsMember({"auto", "each", "memory-aware", "lookahead", "topological"}))
      ->default_str("auto");
  command.add_flag_callback(
      "--fetch-once", [&options] { options.fetch_twice = false; },
      "Fetch each spilled tensor back at most once: the plans the lower bound (--bound) and "
      "the optimal policy cover. By default swap may fetch a tensor twice at its memory floor");
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
                  "Threads the hybrid planner plans on: its starts and refinements side by "
                  "side, and candidate plans where one runs alone (0: this machine's, at most "
                  "8); the plan and its counts are the same with any number")
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

}  // namespace spillway::cli
