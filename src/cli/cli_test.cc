// End-to-end tests of the `spillway` binary: output, JSON and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"

namespace {

using ::testing::HasSubstr;

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

CommandResult Spillway(const std::string& args) {
  const std::string command = std::string(SPILLWAY_BINARY) + " " + args + " 2>&1";
  CommandResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

int CountLines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

TEST(Cli, ModelsListsEveryBuiltInModel) {
  const CommandResult run = Spillway("models");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16",
                           "deeplabv3plus", "unet", "gpt2"}) {
    EXPECT_THAT(run.out, HasSubstr(name));
  }
}

TEST(Cli, HardwareListsEveryPreset) {
  const char* const presets[] = {"v100-16g-nvlink2",
                                 "v100-16g-pcie3",
                                 "a100-40g-pcie4",
                                 "h100-80g-pcie5",
                                 "h200-141g-pcie5",
                                 "gh200-96g-c2c",
                                 "cpu"};
  const CommandResult text = Spillway("hardware");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  for (const char* name : presets) EXPECT_THAT(text.out, HasSubstr(name));
  const CommandResult json = Spillway("hardware --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json list = nlohmann::json::parse(json.out);
  ASSERT_EQ(list.size(), std::size(presets));
  for (size_t i = 0; i < list.size(); ++i) EXPECT_EQ(list[i]["name"], presets[i]);
}

TEST(Cli, HardwareShowsOneProfile) {
  const CommandResult run = Spillway("hardware v100-16g-nvlink2");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Host to device"));
  EXPECT_THAT(run.out, HasSubstr("tf32 none"));
}

TEST(Cli, InspectJsonHasTheDocumentedKeys) {
  const CommandResult run = Spillway("inspect --model resnet50 --image 224 --batch 1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  // torchvision's published ResNet-50 parameter count.
  EXPECT_EQ(report["parameters"].get<int64_t>(), 25557032);
  // 4.09 GMAC published by torchvision, within 2%.
  EXPECT_NEAR(report["forward_macs"].get<double>(), 4.09e9, 0.02 * 4.09e9);
  EXPECT_EQ(report["forward_flops"].get<int64_t>() >= 2 * report["forward_macs"].get<int64_t>(),
            true);
  EXPECT_GT(report["backward_flops"].get<int64_t>(), report["forward_flops"].get<int64_t>());
  EXPECT_GT(report["saved_bytes"].get<int64_t>(), 0);
  // The naive peak holds at least the parameters, their gradients and the saved tensors' largest.
  EXPECT_GT(report["peak_bytes"].get<int64_t>(), 2 * report["parameter_bytes"].get<int64_t>());
  EXPECT_EQ(report["largest_saved"].size(), 10u);
}

TEST(Cli, InspectTextNamesThePeakAndLargestTensors) {
  const CommandResult run = Spillway("inspect --model resnet18 --image 64");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Naive peak"));
  EXPECT_THAT(run.out, HasSubstr("Largest saved tensors"));
  EXPECT_THAT(run.out, HasSubstr("MiB"));
}

TEST(Cli, GptOptionsReachTheBuilder) {
  const CommandResult run = Spillway(
      "inspect --model gpt2 --layers 2 --heads 2 --d-model 64 --seq-len 16 --vocab 100 "
      "--json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["nodes"]["update"].get<int64_t>() > 0, true);
}

TEST(Cli, CompareJsonHasOneObjectPerPolicyWithTheDocumentedKeys) {
  // ResNet-18 at 2048x2048 needs about 1.7 GiB unplanned: 1.25 GiB makes the
  // planners work, and none reports itself infeasible. (Below about 1.1 GiB
  // nothing fits: the stem's batch-norm backward alone holds three 256 MiB
  // tensors, next to 140 MiB of weights, gradients and momentum.)
  const CommandResult run =
      Spillway("compare --model resnet18 --image 2048 --budget 1.25GiB --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json list = nlohmann::json::parse(run.out);
  ASSERT_EQ(list.size(), 5u);
  const char* const policies[] = {"none", "swap", "recompute", "hybrid-seed", "hybrid"};
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& row = list[i];
    EXPECT_EQ(row["policy"], policies[i]);
    for (const char* key : {"feasible", "arena_bytes", "step_time_s", "overhead", "d2h_bytes",
                            "h2d_bytes", "recompute_flops", "planning_ms"}) {
      EXPECT_TRUE(row.contains(key)) << policies[i] << " lacks " << key;
    }
  }
  EXPECT_FALSE(list[0]["feasible"].get<bool>());
  const int64_t budget = int64_t{5} << 28;
  EXPECT_GT(list[0]["arena_bytes"].get<int64_t>(), budget);
  // hybrid fits and its arena is within the budget.
  EXPECT_TRUE(list[4]["feasible"].get<bool>());
  EXPECT_LE(list[4]["arena_bytes"].get<int64_t>(), budget);
  EXPECT_GE(list[4]["overhead"].get<double>(), 0.0);
}

TEST(Cli, PlanReportsAnInfeasibleBudgetWithTheSmallestItReaches) {
  const CommandResult run =
      Spillway("plan --model resnet18 --image 512 --budget 64MiB --policy swap");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("infeasible: the smallest arena it reaches is"));
  EXPECT_THAT(run.out, HasSubstr("rerun with --budget"));
}

TEST(Cli, PlanWritesATraceAPlotAndTheProgram) {
  const std::string dir = ::testing::TempDir();
  const std::string trace = dir + "/spillway_trace.json";
  const std::string plot = dir + "/spillway_memory.svg";
  const std::string dump = dir + "/spillway_program.txt";
  const CommandResult run = Spillway(
      "plan --model resnet18 --image 256 --budget 60% --hardware "
      "a100-40g-pcie4 --trace " +
      trace + " --memory-plot " + plot + " --dump-program " + dump);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Policy       hybrid: feasible"));
  auto read = [](const std::string& path) {
    FILE* file = std::fopen(path.c_str(), "rb");
    std::string text;
    if (file == nullptr) return text;
    std::array<char, 4096> buffer;
    size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0)
      text.append(buffer.data(), n);
    std::fclose(file);
    return text;
  };
  const nlohmann::json events = nlohmann::json::parse(read(trace));
  EXPECT_FALSE(events["traceEvents"].empty());
  EXPECT_THAT(read(plot), HasSubstr("<svg"));
  EXPECT_THAT(read(plot), HasSubstr("budget"));
  EXPECT_THAT(read(dump), HasSubstr("compute  compute"));
}

TEST(Cli, TrainJsonHasTheDocumentedKeysAndResumesBitwise) {
  const std::string workload =
      "train --model resnet18 --image 32 --base-width 4 --batch 2 --classes 3 --seed 5 "
      "--max-evaluations 50 --json";
  const std::string checkpoint = ::testing::TempDir() + "/spillway_cli_train.ckpt";
  const CommandResult straight = Spillway(workload + " --steps 3");
  ASSERT_EQ(straight.exit_code, 0) << straight.out;
  const CommandResult first = Spillway(workload + " --steps 2 --save " + checkpoint);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const CommandResult resumed = Spillway(workload + " --steps 1 --resume " + checkpoint);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  // --json sends progress to stderr, which Spillway() merges: the JSON is
  // the output's last object.
  const auto summary = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.find("{\n")));
  };
  const nlohmann::json json = summary(straight.out);
  for (const char* key : {"model",
                          "workload",
                          "optimizer",
                          "lr",
                          "policy",
                          "hardware",
                          "backend",
                          "threads",
                          "data",
                          "seed",
                          "first_step",
                          "last_step",
                          "losses",
                          "initial_loss",
                          "final_loss",
                          "checksum",
                          "budget_bytes",
                          "arena_bytes",
                          "arena_high_water_bytes",
                          "peak_host_bytes",
                          "bytes_to_host_per_step",
                          "bytes_to_device_per_step",
                          "spilled_tensors",
                          "recomputed_tensors",
                          "mean_step_s",
                          "step_seconds",
                          "mean_recompute_s",
                          "samples_per_s",
                          "planning_s",
                          "resumed_from",
                          "checkpoint"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json["losses"].size(), 3u);
  EXPECT_EQ(json["step_seconds"].size(), 3u);
  EXPECT_LE(json["arena_high_water_bytes"].get<int64_t>(), json["budget_bytes"].get<int64_t>());
  const nlohmann::json after = summary(resumed.out);
  EXPECT_EQ(after["first_step"], 3);
  EXPECT_EQ(after["resumed_from"], checkpoint);
  EXPECT_EQ(after["checksum"], json["checksum"]);
  EXPECT_EQ(after["final_loss"], json["final_loss"]);
}

TEST(Cli, TrainErrorsAreOneLine) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"train --model resnet18 --image 32 --save-every 5", "--save-every needs --save"},
           {"train --model resnet18 --image 32 --resume /nonexistent/run.ckpt",
            "cannot open checkpoint '/nonexistent/run.ckpt'"},
           {"train --model resnet18 --image 32 --budget 1MiB --policy swap",
            "the smallest arena it reaches is"},
           {"train --model gpt2 --layers 1 --d-model 16 --heads 2 --seq-len 8 --vocab 16 --data "
            "/nonexistent",
            "'/nonexistent' is not a directory"}}) {
    const CommandResult run = Spillway(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr(message)) << args;
    EXPECT_EQ(CountLines(run.out), 1) << run.out;
  }
}

// A tiny CNN as an ONNX file: conv 3x3 -> relu -> global pool -> flatten ->
// linear (Gemm with transB), inputs [2,3,8,8], logits [2,5].
std::string WriteTinyOnnxModel() {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  ::onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("tiny");
  auto value_info = [](::onnx::ValueInfoProto* info, const std::string& name,
                       std::vector<int64_t> dims) {
    info->set_name(name);
    auto* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) type->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value_info(graph.add_input(), "images", {2, 3, 8, 8});
  value_info(graph.add_output(), "logits", {2, 5});
  auto weight = [&](const std::string& name, std::vector<int64_t> dims) {
    ::onnx::TensorProto* t = graph.add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    for (int64_t i = 0; i < count; ++i) t->add_float_data(0.01f * static_cast<float>(i % 7));
  };
  auto node = [&](const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    ::onnx::NodeProto* n = graph.add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(out);
    return n;
  };
  weight("conv.weight", {4, 3, 3, 3});
  weight("fc.weight", {5, 4});
  weight("fc.bias", {5});
  ::onnx::AttributeProto* pads = node("Conv", {"images", "conv.weight"}, "conv")->add_attribute();
  pads->set_name("pads");
  pads->set_type(::onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  node("Relu", {"conv"}, "relu");
  node("GlobalAveragePool", {"relu"}, "pool");
  node("Flatten", {"pool"}, "flat");
  ::onnx::AttributeProto* trans_b =
      node("Gemm", {"flat", "fc.weight", "fc.bias"}, "logits")->add_attribute();
  trans_b->set_name("transB");
  trans_b->set_type(::onnx::AttributeProto::INT);
  trans_b->set_i(1);

  const std::string path =
      fmt::format("{}/spillway_cli_tiny_{}.onnx", ::testing::TempDir(), getpid());
  std::ofstream file(path, std::ios::binary);
  model.SerializeToOstream(&file);
  return path;
}

TEST(Cli, InspectAndPlanTakeAnOnnxModel) {
  const std::string path = WriteTinyOnnxModel();
  const CommandResult run = Spillway("inspect --onnx " + path + " --loss cross-entropy --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["parameters"].get<int64_t>(), 4 * 3 * 3 * 3 + 5 * 4 + 5);
  EXPECT_EQ(report["model"].get<std::string>(), path);

  // A larger batch and image than the file's, in ONNX order.
  const CommandResult larger =
      Spillway("inspect --onnx " + path + " --loss cross-entropy --input-shape images=16x3x64x64");
  ASSERT_EQ(larger.exit_code, 0) << larger.out;
  EXPECT_THAT(larger.out, HasSubstr("images=16x3x64x64"));

  const CommandResult batch =
      Spillway("inspect --onnx " + path + " --loss cross-entropy --batch 7 --json");
  ASSERT_EQ(batch.exit_code, 0) << batch.out;
  EXPECT_EQ(nlohmann::json::parse(batch.out)["workload"].get<std::string>(),
            path + " (ONNX), batch 7");

  const CommandResult plan =
      Spillway("plan --onnx " + path + " --loss cross-entropy --max-evaluations 20");
  EXPECT_EQ(plan.exit_code, 0) << plan.out;

  const CommandResult no_loss = Spillway("inspect --onnx " + path);
  EXPECT_EQ(no_loss.exit_code, 2);
  EXPECT_THAT(no_loss.out, HasSubstr("add one with --loss cross-entropy"));
}

struct BadInput {
  const char* args;
  const char* message;
};

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, ExitsWithTwoAndOneLine) {
  const CommandResult run = Spillway(GetParam().args);
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_THAT(run.out, HasSubstr("spillway: error:"));
  EXPECT_THAT(run.out, HasSubstr(GetParam().message));
  EXPECT_LE(CountLines(run.out), 2) << run.out;  // the error, and for flag errors a hint
}

INSTANTIATE_TEST_SUITE_P(
    Errors, CliBadInput,
    ::testing::Values(BadInput{"inspect --model resnet51", "resnet51"},
                      BadInput{"inspect --model resnet50 --batch 0", "batch"},
                      BadInput{"inspect --model resnet50 --image -5", "height"},
                      BadInput{"inspect --model vgg16 --image 16", "too small"},
                      BadInput{"inspect --model resnet50 --image 8000 --batch 2000000000000",
                               "64-bit"},
                      BadInput{"inspect --model resnet50 --image 224 --height 100", "--image"},
                      BadInput{"inspect --model resnet50 --image lots", "lots"},
                      BadInput{"inspect", "--model"}, BadInput{"frobnicate", "subcommand"},
                      BadInput{"hardware v100", "v100-16g-nvlink2, v100-16g-pcie3"},
                      BadInput{"plan --model resnet18 --budget lots", "budget"},
                      BadInput{"plan --model resnet18 --budget 150%", "budget"},
                      BadInput{"plan --model resnet18 --policy greedy", "greedy"},
                      BadInput{"compare --model resnet18 --hardware tpu", "tpu"},
                      BadInput{"plan --model resnet18 --trace /nonexistent/dir/t.json",
                               "/nonexistent/dir/t.json"},
                      BadInput{"inspect --model resnet18 --onnx m.onnx", "exactly one of"},
                      BadInput{"inspect --onnx /nonexistent/m.onnx", "/nonexistent/m.onnx"},
                      BadInput{"inspect --onnx m.onnx --input-shape images", "NAME=DxDx"},
                      BadInput{"inspect --model resnet18 --loss cross-entropy", "--onnx"},
                      BadInput{"train --onnx m.onnx", "not supported yet"}));

}  // namespace
