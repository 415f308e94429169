// End-to-end tests of the `spillway` binary: output, JSON and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"
#include "support/npy.h"
#include "support/status_macros.h"
#include "train/checkpoint.h"

namespace {

using ::testing::HasSubstr;

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs `spillway args`; `environment` ("NAME=value ...") is set for it alone.
CommandResult Spillway(const std::string& args, const std::string& environment = "") {
  const std::string command = (environment.empty() ? "" : "env " + environment + " ") +
                              SPILLWAY_BINARY + " " + args + " 2>&1";
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

// A file's whole content; empty when it cannot be read.
std::string ReadFile(const std::string& path) {
  std::string text;
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return text;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0) text.append(buffer.data(), n);
  std::fclose(file);
  return text;
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

// `spillway models` lists each option by the flag the command line takes: each
// listed flag, given its listed default, is accepted for its model.
TEST(Cli, ModelsListsFlagsTheCommandLineAccepts) {
  const CommandResult json = Spillway("models --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const CommandResult text = Spillway("models");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  const nlohmann::json list = nlohmann::json::parse(json.out);
  ASSERT_FALSE(list.empty());
  int checked = 0;
  for (const nlohmann::json& model : list) {
    const std::string name = model.at("name").get<std::string>();
    for (const nlohmann::json& option : model.at("options")) {
      const std::string flag = option.at("flag").get<std::string>();
      const std::string value = option.at("default").get<std::string>();
      EXPECT_TRUE(flag.starts_with("--")) << flag;
      EXPECT_EQ(flag.find('_'), std::string::npos) << flag;
      EXPECT_THAT(text.out, HasSubstr("    " + flag + " ")) << name;
      const CommandResult run =
          Spillway(fmt::format("inspect --model {} {} {}", name, flag, value));
      EXPECT_EQ(run.exit_code, 0) << name << " " << flag << " " << value << ": " << run.out;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  EXPECT_THAT(text.out, HasSubstr("--base-width"));
  EXPECT_THAT(text.out, HasSubstr("--layers"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("--n_layer")));
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
  ASSERT_EQ(list.size(), 7u);
  const char* const policies[] = {
      "none", "swap", "recompute", "swap-lms", "hybrid-seed", "hybrid-seed-lms", "hybrid"};
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
  EXPECT_TRUE(list[6]["feasible"].get<bool>());
  EXPECT_LE(list[6]["arena_bytes"].get<int64_t>(), budget);
  EXPECT_GE(list[6]["overhead"].get<double>(), 0.0);
  // swap-lms names the setting TFLMS's tuning chose.
  EXPECT_TRUE(list[3].contains("tuning"));
}

// Every policy of a comparison plans in one backward order, which the
// table's first line names (and --backward-order sets).
TEST(Cli, CompareNamesTheBackwardOrderItsPoliciesPlanIn) {
  for (const char* order : {"topological", "memory-aware"}) {
    const CommandResult run =
        Spillway(std::string("compare --model resnet18 --image 512 --budget 200MiB "
                             "--backward-order ") +
                 order);
    ASSERT_EQ(run.exit_code, 0) << run.out;
    EXPECT_THAT(run.out, HasSubstr(std::string(", ") + order + " backward order\n")) << run.out;
  }
}

// --backward-order each: hybrid plans in every order, the table says which
// order's plan it kept, and a bound (which covers one order) is refused.
TEST(Cli, EachBackwardOrderSaysWhichOrdersPlanHybridKeptAndRefusesABound) {
  const std::string workload = "--model resnet18 --image 512 --budget 200MiB";
  const CommandResult compare = Spillway("compare " + workload + " --backward-order each");
  ASSERT_EQ(compare.exit_code, 0) << compare.out;
  EXPECT_THAT(compare.out,
              ::testing::ContainsRegex("hybrid planned in every backward order: its plan is the "
                                       "(memory-aware|lookahead|topological) order's"));
  const CommandResult json = Spillway("plan " + workload + " --backward-order each --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json result = nlohmann::json::parse(json.out);
  EXPECT_THAT(compare.out, HasSubstr("its plan is the " +
                                     result.at("backward_order").get<std::string>() + " order's"));
  // Its step is none's to the last few ulps (summed in another order): no
  // "-0.0%" for a negative hair.
  const CommandResult text = Spillway("plan " + workload + " --backward-order each");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("overhead +0.0%"));
  EXPECT_THAT(text.out, HasSubstr(fmt::format("{} backward order (the fastest plan of {} orders)",
                                              result.at("backward_order").get<std::string>(),
                                              result.at("orders_planned").get<int>())));
  EXPECT_GE(result.at("orders_planned").get<int>(), 2);
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("-0.0%")));
  for (const char* command : {"plan", "compare"}) {
    const CommandResult bound =
        Spillway(std::string(command) + " " + workload + " --backward-order each --bound");
    EXPECT_EQ(bound.exit_code, 2) << bound.out;
    EXPECT_THAT(bound.out, HasSubstr("--bound bounds the plans of one backward order"));
  }
}

TEST(Cli, SweepPlansEachBudgetAndHybridsStepNeverRises) {
  // Plans fit from about 55% of the `none` arena (its activations outweigh
  // its parameters).
  const std::string workload =
      "--model resnet18 --image 224 --batch 16 --base-width 16 --hardware h200-141g-pcie5";
  const CommandResult run = Spillway("sweep " + workload + " --from 40% --points 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json sweep = nlohmann::json::parse(run.out);
  EXPECT_EQ(sweep["policy"], "hybrid");
  const nlohmann::json& points = sweep["points"];
  ASSERT_EQ(points.size(), 4u);
  const double shares[] = {0.4, 0.6, 0.8, 1.0};
  double previous_step = INFINITY;
  for (size_t i = 0; i < points.size(); ++i) {
    const nlohmann::json& point = points[i];
    EXPECT_NEAR(point["share_of_none_arena"].get<double>(), shares[i], 1e-6);
    EXPECT_EQ(point["feasible"].get<bool>(), i > 0) << "the floor moved: choose other budgets";
    if (!point["feasible"].get<bool>()) continue;
    EXPECT_LE(point["arena_bytes"].get<int64_t>(), point["budget_bytes"].get<int64_t>());
    EXPECT_LE(point["step_time_s"].get<double>(), previous_step);
    previous_step = point["step_time_s"].get<double>();
  }
  EXPECT_EQ(points[3]["overhead"].get<double>(), 0.0);

  const std::string plot =
      (std::filesystem::temp_directory_path() / fmt::format("sweep.{}.svg", getpid())).string();
  const CommandResult text =
      Spillway("sweep " + workload + " --budgets 90MiB,70MiB --plot " + plot);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  const std::string svg = ReadFile(plot);
  std::filesystem::remove(plot);
  EXPECT_TRUE(svg.starts_with("<svg ")) << svg.substr(0, 100);
  EXPECT_THAT(svg, HasSubstr("2 of 2 budgets have a plan"));
  EXPECT_THAT(text.out,
              HasSubstr("Workload     resnet18, batch 16, 224x224 (sgd) on h200-141g-pcie5"));
  EXPECT_THAT(text.out, HasSubstr("plan made at"));
  // Smallest first, whatever the order given.
  EXPECT_LT(text.out.find("70.0 MiB"), text.out.find("90.0 MiB"));

  // Several policies: a sweep each, a list in JSON, one plot.
  const CommandResult several =
      Spillway("sweep " + workload + " --budgets 70MiB,90MiB --policy swap,hybrid --json");
  ASSERT_EQ(several.exit_code, 0) << several.out;
  const nlohmann::json sweeps = nlohmann::json::parse(several.out);
  ASSERT_EQ(sweeps.size(), 2u);
  EXPECT_EQ(sweeps[0]["policy"], "swap");
  EXPECT_EQ(sweeps[1]["policy"], "hybrid");
  EXPECT_EQ(sweeps[0]["points"].size(), 2u);
  EXPECT_EQ(sweeps[1]["points"][1]["budget_bytes"], int64_t{90} << 20);
}

TEST(Cli, PlanReportsAnInfeasibleBudgetWithTheSmallestItReaches) {
  const CommandResult run =
      Spillway("plan --model resnet18 --image 512 --budget 64MiB --policy swap");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("infeasible: the smallest arena it reaches is"));
  EXPECT_THAT(run.out, HasSubstr("rerun with --budget"));
}

// The exact policy on a small model: a bound, a gap, its own plan, and the
// bound in --json; compare --optimal and --bound put every plan against it.
TEST(Cli, OptimalPrintsItsBoundAndEveryPlansGap) {
  const std::string workload = "--model resnet18 --image 224 --batch 16 --budget 330MiB";
  const CommandResult plan = Spillway("plan " + workload + " --policy optimal");
  if (plan.out.find("needs CBC") != std::string::npos) GTEST_SKIP() << "built without CBC";
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  EXPECT_THAT(plan.out, HasSubstr("Bound        no plan that fits steps faster than"));
  EXPECT_THAT(plan.out, HasSubstr("Gap          this plan is within +"));
  EXPECT_THAT(plan.out, HasSubstr("Relaxation   its optimum's plan:"));

  const CommandResult json = Spillway("plan " + workload + " --policy optimal --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json result = nlohmann::json::parse(json.out);
  const nlohmann::json& bound = result.at("lower_bound");
  EXPECT_EQ(bound.at("method"), "milp");
  EXPECT_TRUE(bound.at("solved").get<bool>());
  EXPECT_LE(bound.at("step_time_s").get<double>(), result.at("step_time_s").get<double>());
  EXPECT_GE(bound.at("step_time_s").get<double>(), result.at("none_step_time_s").get<double>());
  EXPECT_GE(bound.at("gap").get<double>(), 0.0);

  const CommandResult compare = Spillway("compare " + workload + " --optimal");
  ASSERT_EQ(compare.exit_code, 0) << compare.out;
  EXPECT_THAT(compare.out, HasSubstr("vs bound"));
  EXPECT_THAT(compare.out, HasSubstr("\noptimal "));

  const CommandResult lp = Spillway("compare " + workload + " --bound --json");
  ASSERT_EQ(lp.exit_code, 0) << lp.out;
  int gaps = 0;
  for (const nlohmann::json& row : nlohmann::json::parse(lp.out)) {
    if (!row.at("feasible").get<bool>()) continue;
    EXPECT_GE(row.at("gap_to_bound").get<double>(), -1e-9) << row.at("policy");
    ++gaps;
  }
  EXPECT_GE(gaps, 3);
}

TEST(Cli, APlanThatFetchesTwiceGetsNoGapToTheBoundAndFetchOnceKeepsToTheBoundsPlans) {
  // ResNet-50 at 3000x3000 fits 1.95 GiB only with tensors fetched twice, in
  // the lookahead order; the bound covers plans that fetch each tensor once,
  // and proves that none of those fits.
  const std::string workload =
      "--model resnet50 --image 3000 --hardware v100-16g-nvlink2 --budget 1.95GiB";
  const CommandResult plan = Spillway("plan " + workload + " --bound");
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  EXPECT_THAT(plan.out, HasSubstr("Policy       hybrid: feasible"));
  EXPECT_THAT(plan.out, HasSubstr("lookahead backward order"));
  EXPECT_THAT(plan.out, HasSubstr("Bound        no plan that fetches each tensor once fits this "
                                  "budget (proven by an LP"));
  EXPECT_THAT(plan.out,
              HasSubstr("fetches them again, which the bound does not cover (--fetch-once"));
  EXPECT_THAT(plan.out, ::testing::Not(HasSubstr("this plan is within")));
  EXPECT_THAT(plan.out,
              ::testing::ContainsRegex(
                  "tensors spilled, [0-9]+ of them dropped between reads and fetched again"));

  const CommandResult once = Spillway("plan " + workload + " --fetch-once --json");
  ASSERT_EQ(once.exit_code, 0) << once.out;
  const nlohmann::json result = nlohmann::json::parse(once.out);
  EXPECT_FALSE(result.at("feasible").get<bool>());
  EXPECT_NE(result.at("backward_order"), "lookahead");
  EXPECT_GT(result.at("smallest_arena_bytes").get<int64_t>(), int64_t{2} << 30);
  EXPECT_EQ(result.at("refetched_tensors"), 0);
  const CommandResult twice = Spillway("plan " + workload + " --json");
  ASSERT_EQ(twice.exit_code, 0) << twice.out;
  EXPECT_GT(nlohmann::json::parse(twice.out).at("refetched_tensors").get<int>(), 0);
}

// A graph with its own costs: three forward nodes of 1 ms and 256 MiB each,
// a loss, three backward nodes of 2 ms and 64 MiB; b_i reads f_{i-1}.
std::string WriteChainGraph() {
  const std::string path = ::testing::TempDir() + "/spillway_chain.json";
  nlohmann::json graph = {{"directed", true}, {"graph", {{"time_unit", "ms"}}}};
  nlohmann::json& nodes = graph["nodes"] = nlohmann::json::array();
  nlohmann::json& links = graph["links"] = nlohmann::json::array();
  const int64_t mib256 = int64_t{256} << 20;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(
        {{"id", fmt::format("f{}", i)}, {"duration", 1.0}, {"size", mib256}, {"phase", "forward"}});
    if (i > 0)
      links.push_back({{"source", fmt::format("f{}", i - 1)}, {"target", fmt::format("f{}", i)}});
  }
  nodes.push_back({{"id", "loss"}, {"duration", 1.0}, {"size", 4}, {"phase", "forward"}});
  links.push_back({{"source", "f2"}, {"target", "loss"}});
  for (int i = 2; i >= 0; --i) {
    nodes.push_back({{"id", fmt::format("b{}", i)},
                     {"duration", 2.0},
                     {"size", mib256 / 4},
                     {"phase", "backward"}});
    links.push_back({{"source", i == 2 ? "loss" : fmt::format("b{}", i + 1)},
                     {"target", fmt::format("b{}", i)}});
    if (i > 0)
      links.push_back({{"source", fmt::format("f{}", i - 1)}, {"target", fmt::format("b{}", i)}});
  }
  std::ofstream(path) << graph.dump();
  return path;
}

TEST(Cli, PlanAndCompareTakeAGraphWithItsOwnCosts) {
  const std::string graph = WriteChainGraph();
  // Room for everything: the step is the file's durations, 4 x 1 ms + 3 x 2 ms.
  const CommandResult roomy = Spillway("plan --graph " + graph + " --policy none --json");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.out;
  const nlohmann::json plan = nlohmann::json::parse(roomy.out);
  EXPECT_NEAR(plan["step_time_s"].get<double>(), 10e-3, 1e-12);

  // Keeping f0 for the backward pass needs f0, f1 and f2 at once (768 MiB);
  // recomputing it needs 512 MiB at most. Without a link, recomputation alone
  // makes room, and the Program names the file's nodes.
  const std::string dump = ::testing::TempDir() + "/spillway_chain_program.txt";
  const CommandResult tight =
      Spillway("plan --graph " + graph +
               " --budget 640MiB --no-link --policy recompute --dump-program " + dump);
  ASSERT_EQ(tight.exit_code, 0) << tight.out;
  EXPECT_THAT(tight.out, HasSubstr("(node-link graph) on v100-16g-nvlink2 without a host link"));
  EXPECT_THAT(tight.out, HasSubstr("Policy       recompute: feasible"));
  EXPECT_THAT(tight.out, HasSubstr("0 B to host"));
  const std::string text = ReadFile(dump);
  EXPECT_THAT(text, HasSubstr("f0"));
  EXPECT_THAT(text, HasSubstr("b2"));

  // inspect: the forward values backward nodes read (f0, f1 and the loss).
  const CommandResult inspected = Spillway("inspect --json --graph " + graph);
  ASSERT_EQ(inspected.exit_code, 0) << inspected.out;
  const nlohmann::json summary = nlohmann::json::parse(inspected.out);
  EXPECT_EQ(summary["saved_tensors"], 3);
  EXPECT_EQ(summary["saved_bytes"], 2 * (int64_t{256} << 20) + 4);
  EXPECT_TRUE(summary["optimizer"].is_null());

  const CommandResult compare = Spillway("compare --graph " + graph + " --budget 640MiB --no-link");
  ASSERT_EQ(compare.exit_code, 0) << compare.out;
  EXPECT_THAT(compare.out,
              HasSubstr("hybrid          not run: it spills, and there is no host link"));
  EXPECT_THAT(compare.out, HasSubstr("recompute "));
}

// spillway profile times a small model's step on the CPU; plan --costs then
// plans with those times: the step it predicts for none is their sum.
TEST(Cli, ProfileWritesACostsFileThatPlanUses) {
  const std::string costs = ::testing::TempDir() + "/spillway_costs.json";
  const std::string model = "--model resnet18 --image 32 --batch 2 --base-width 4 --classes 4";
  const CommandResult profiled =
      Spillway("profile " + model + " --threads 1 --warmup 0 --repeats 3 --out " + costs);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.out;
  EXPECT_THAT(profiled.out, HasSubstr("profile: step 3 of 3"));
  const std::string text = ReadFile(costs);
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json["format"], "spillway-costs");
  EXPECT_EQ(json["measured_on"]["threads"], 1);
  double sum = 0;
  for (const auto& [name, seconds] : json["nodes"].items()) sum += seconds.get<double>();
  EXPECT_GT(json["nodes"].size(), 50u);
  EXPECT_GE(json["copies"]["device_to_host"].size(), 2u);
  // The steps were timed again beside a copying thread: how much each side
  // slowed the other (a measurement, so only its form is certain).
  EXPECT_THAT(profiled.out, HasSubstr("profile: beside copies, step 3 of"));
  EXPECT_THAT(profiled.out, HasSubstr("Contention   a copy slows kernels by"));
  for (const char* slowdown : {"compute_slowdown", "copy_slowdown"}) {
    ASSERT_TRUE(json["contention"][slowdown].is_number()) << slowdown;
    EXPECT_GE(json["contention"][slowdown].get<double>(), 0) << slowdown;
  }

  const CommandResult planned =
      Spillway("plan " + model + " --policy none --hardware cpu --json --costs " + costs);
  ASSERT_EQ(planned.exit_code, 0) << planned.out;
  EXPECT_THAT(planned.out, HasSubstr("costs: "));
  EXPECT_THAT(planned.out, HasSubstr("while they overlap, a copy slows kernels by"));
  const nlohmann::json plan = nlohmann::json::parse(planned.out.substr(planned.out.find('{')));
  EXPECT_NEAR(plan["step_time_s"].get<double>(), sum, 1e-9 * sum);

  // train plans with them too, and says what it predicted beside what it measured.
  const CommandResult trained =
      Spillway("train " + model + " --policy none --steps 1 --threads 1 --json --costs " + costs);
  ASSERT_EQ(trained.exit_code, 0) << trained.out;
  const nlohmann::json run = nlohmann::json::parse(trained.out.substr(trained.out.find('{')));
  EXPECT_NEAR(run["predicted_step_s"].get<double>(), sum, 1e-9 * sum);

  // A costs file of another graph is refused.
  const CommandResult other = Spillway("plan --model unet --image 32 --depth 2 --costs " + costs);
  EXPECT_EQ(other.exit_code, 2) << other.out;
  EXPECT_THAT(other.out, HasSubstr("it was measured on another graph"));
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
  const nlohmann::json events = nlohmann::json::parse(ReadFile(trace));
  EXPECT_FALSE(events["traceEvents"].empty());
  EXPECT_THAT(ReadFile(plot), HasSubstr("<svg"));
  EXPECT_THAT(ReadFile(plot), HasSubstr("budget"));
  EXPECT_THAT(ReadFile(dump), HasSubstr("compute  compute"));
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
                          "onednn_version",
                          "onednn_isa",
                          "direct_kernels",
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
                          "predicted_step_s",
                          "step_seconds",
                          "mean_recompute_s",
                          "samples_per_s",
                          "planning_s",
                          "resumed_from",
                          "checkpoint",
                          "kernels"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json["losses"].size(), 3u);
  EXPECT_EQ(json["step_seconds"].size(), 3u);
  EXPECT_THAT(json["onednn_version"].get<std::string>(),
              ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_FALSE(json["onednn_isa"].get<std::string>().empty());
  EXPECT_THAT(json["direct_kernels"].get<std::string>(),
              ::testing::AnyOf("generic", "avx2", "avx512"));
  EXPECT_LE(json["arena_high_water_bytes"].get<int64_t>(), json["budget_bytes"].get<int64_t>());
  // The loss has no oneDNN or direct kernel: the summary names it.
  EXPECT_THAT(json["kernels"].get<std::string>(),
              ::testing::MatchesRegex("oneDNN [1-9][0-9]* calls, direct loops [1-9][0-9]*, "
                                      "reference [1-9][0-9]* \\(.*cross_entropy_loss.*\\)"));
  const nlohmann::json after = summary(resumed.out);
  EXPECT_EQ(after["first_step"], 3);
  EXPECT_EQ(after["resumed_from"], checkpoint);
  EXPECT_EQ(after["checksum"], json["checksum"]);
  EXPECT_EQ(after["final_loss"], json["final_loss"]);
}

// The CPU backend's ISA switches are checked before anything runs: oneDNN
// would ignore a value it does not know and run its default path.
TEST(Cli, BadIsaSwitchesAreOneLineErrors) {
  const std::string train =
      "train --model resnet18 --image 32 --base-width 4 --batch 2 --classes 3 --steps 1";
  for (const auto& [environment, message] : std::vector<std::pair<std::string, std::string>>{
           {"SPILLWAY_DIRECT_KERNELS=avx3", "unknown direct-kernel build 'avx3'"},
           {"ONEDNN_MAX_CPU_ISA=AVX3", "ONEDNN_MAX_CPU_ISA=AVX3: not an ISA oneDNN knows"}}) {
    const CommandResult run = Spillway(train, environment);
    EXPECT_EQ(run.exit_code, 2) << environment << "\n" << run.out;
    EXPECT_EQ(CountLines(run.out), 1) << run.out;
    EXPECT_THAT(run.out, HasSubstr(message)) << environment;
  }
  // The reference backend runs no oneDNN code and does not care.
  EXPECT_EQ(Spillway(train + " --backend reference", "SPILLWAY_DIRECT_KERNELS=avx3").exit_code, 0);
}

TEST(Cli, TrainTraceSetsTheMeasuredStepBesideTheSimulatedOne) {
  const std::string trace = ::testing::TempDir() + "/spillway_cli_train_trace.json";
  const CommandResult run = Spillway(
      "train --model resnet18 --image 64 --base-width 8 --batch 4 --steps 2 --policy hybrid "
      "--budget 3.5MiB --trace " +
      trace);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("Trace        " + trace + " (step 2 measured"));
  std::ifstream in(trace);
  const nlohmann::json json = nlohmann::json::parse(in);
  // Two processes with every kernel and copy of the Program on each: the
  // measured step (its copies took time) and the simulated one.
  std::map<int, std::string> processes;
  std::map<std::pair<int, std::string>, int> events;  // (pid, category) -> count
  for (const nlohmann::json& event : json.at("traceEvents")) {
    const int pid = event.at("pid");
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      processes[pid] = event.at("args").at("name");
    }
    if (event.at("ph") == "X") ++events[std::pair(pid, event.at("cat").get<std::string>())];
  }
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[1], "measured: hybrid on cpu, step 2");
  EXPECT_EQ(processes[2], "simulated: hybrid on cpu");
  for (const char* category : {"compute", "copy_to_host", "copy_to_device"}) {
    const int measured = events[std::pair(1, std::string(category))];
    EXPECT_GT(measured, 0) << category;
    EXPECT_EQ(measured, (events[std::pair(2, std::string(category))])) << category;
  }
  const nlohmann::json& measured = json.at("otherData").at("processes").at(0);
  EXPECT_GT(measured.at("step_time_ms").get<double>(), 0);
  EXPECT_GT(measured.at("d2h_bytes").get<int64_t>(), 0);
  EXPECT_EQ(measured.at("d2h_bytes"), json.at("otherData").at("processes").at(1).at("d2h_bytes"));
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
            "'/nonexistent' is not a directory"},
           {"train --model resnet18 --image 32 --trace /nonexistent/step.json", "/nonexistent"},
           {"train --model resnet18 --image 32 --math-mode tf32",
            "the cpu backend computes in fp32 only"},
           {"train --model resnet18 --image 32 --math-mode fp16", "fp16 not in {fp32,tf32}"}}) {
    const CommandResult run = Spillway(args);
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.out;
    EXPECT_THAT(run.out, HasSubstr(message)) << args;
    EXPECT_EQ(CountLines(run.out), 1) << run.out;
  }
}

// A tiny CNN as an ONNX file: conv 3x3 -> relu -> global pool -> flatten ->
// linear (Gemm with transB), inputs [2,3,8,8] named `input`, logits [2,5].
// Element i of every weight is 0.01 * (i % 7).
std::string WriteTinyOnnxModel(const std::string& input = "images") {
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
  value_info(graph.add_input(), input, {2, 3, 8, 8});
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
  ::onnx::AttributeProto* pads = node("Conv", {input, "conv.weight"}, "conv")->add_attribute();
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
      fmt::format("{}/spillway_cli_tiny_{}_{}.onnx", ::testing::TempDir(), input, getpid());
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

  // A frozen convolution is used, not trained: only the head's parameters remain.
  const CommandResult frozen =
      Spillway("inspect --onnx " + path + " --loss cross-entropy --freeze conv. --json");
  ASSERT_EQ(frozen.exit_code, 0) << frozen.out;
  EXPECT_EQ(nlohmann::json::parse(frozen.out)["parameters"].get<int64_t>(), 5 * 4 + 5);
  const CommandResult typo =
      Spillway("inspect --onnx " + path + " --loss cross-entropy --freeze cnv");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.out, HasSubstr("--freeze 'cnv' matches no initializer"));

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

// The tiny model's cross-entropy on one 8x8 RGB image (HWC bytes) for
// `label`, computed here from the weights WriteTinyOnnxModel stores and the
// normalization a data directory gets (docs/training.md).
double TinyModelLoss(const std::vector<uint8_t>& rgb, int label) {
  const auto weight = [](int index) {
    return static_cast<double>(0.01f * static_cast<float>(index % 7));
  };
  constexpr std::array<double, 3> kMean = {0.485, 0.456, 0.406};
  constexpr std::array<double, 3> kStd = {0.229, 0.224, 0.225};
  const auto pixel = [&](int y, int x, int c) {
    if (y < 0 || y >= 8 || x < 0 || x >= 8) return 0.0;  // the convolution's zero padding
    const double unit = rgb[static_cast<size_t>((y * 8 + x) * 3 + c)] / 255.0;
    return (unit - kMean[static_cast<size_t>(c)]) / kStd[static_cast<size_t>(c)];
  };
  std::array<double, 4> pooled{};
  for (int o = 0; o < 4; ++o) {
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        double sum = 0;  // OIHW weights
        for (int c = 0; c < 3; ++c) {
          for (int kh = 0; kh < 3; ++kh) {
            for (int kw = 0; kw < 3; ++kw) {
              sum += weight(((o * 3 + c) * 3 + kh) * 3 + kw) * pixel(y + kh - 1, x + kw - 1, c);
            }
          }
        }
        pooled[static_cast<size_t>(o)] += std::max(sum, 0.0) / 64;
      }
    }
  }
  std::array<double, 5> logits{};
  for (int j = 0; j < 5; ++j) {
    double logit = weight(j);  // fc.bias
    for (int k = 0; k < 4; ++k) logit += weight(j * 4 + k) * pooled[static_cast<size_t>(k)];
    logits[static_cast<size_t>(j)] = logit;
  }
  double exp_sum = 0;
  for (double logit : logits) exp_sum += std::exp(logit);
  return std::log(exp_sum) - logits[static_cast<size_t>(label)];
}

void WriteRgbPng(const std::string& path, const std::vector<uint8_t>& rgb) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = 8;
  image.height = 8;
  image.format = PNG_FORMAT_RGB;
  ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr), 0)
      << image.message;
}

TEST(Cli, TrainStartsAnOnnxModelFromTheWeightsInItsFile) {
  // The image input keeps the file's name; the loss adds "labels".
  const std::string model = WriteTinyOnnxModel("x.1");
  // Two classes of two images each, all four in every batch of 4: the first
  // step's loss is their mean loss under the file's weights, whatever the
  // shuffle.
  const std::filesystem::path data =
      std::filesystem::path(::testing::TempDir()) / fmt::format("spillway_cli_onnx_{}", getpid());
  std::filesystem::remove_all(data);
  double expected = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<uint8_t> rgb(8 * 8 * 3);
    for (size_t p = 0; p < rgb.size(); ++p) {
      rgb[p] = static_cast<uint8_t>((37 * (p / 24) + 11 * (p / 3 % 8) + 71 * (p % 3) + 50 * i));
    }
    const int label = i / 2;
    const std::filesystem::path dir = data / (label == 0 ? "a" : "b");
    std::filesystem::create_directories(dir);
    WriteRgbPng((dir / fmt::format("{}.png", i)).string(), rgb);
    expected += TinyModelLoss(rgb, label) / 4;
  }
  const std::string train = "train --onnx " + model + " --loss cross-entropy --batch 4 --data " +
                            data.string() +
                            " --policy hybrid --max-evaluations 20 --steps 5 --lr 0.1 --threads 1";
  // The smallest budget the plan fits, as the error for a smaller one names
  // it: the plan must spill or recompute (none needs more).
  const CommandResult too_small = Spillway(train + " --budget 1KiB");
  ASSERT_EQ(too_small.exit_code, 2) << too_small.out;
  const size_t hint = too_small.out.find("rerun with --budget ");
  ASSERT_NE(hint, std::string::npos) << too_small.out;
  const int64_t budget = std::stoll(too_small.out.substr(hint + 20));
  const CommandResult run = Spillway(train + fmt::format(" --budget {} --json", budget));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json json = nlohmann::json::parse(run.out.substr(run.out.find("{\n")));
  EXPECT_EQ(json["model"], model);
  EXPECT_THAT(json["data"].get<std::string>(), HasSubstr("(2 classes, 4 files)"));
  const std::vector<double> losses = json["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 5u);
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
  // Seed-initialized weights would give another loss by far more than the
  // f32 rounding allowed here.
  EXPECT_NEAR(losses.front(), expected, 1e-5);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_EQ(json["budget_bytes"].get<int64_t>(), budget);
  EXPECT_LE(json["arena_high_water_bytes"].get<int64_t>(), budget);
  EXPECT_GT(json["spilled_tensors"].get<int64_t>() + json["recomputed_tensors"].get<int64_t>(), 0);
}

// Train an ONNX model, export the checkpoint into it, and the exported file
// imports with exactly the trained values; nothing is written for a
// checkpoint of another model.
TEST(Cli, ExportWritesTheTrainedValuesBackIntoTheOnnxModel) {
  const std::string model = WriteTinyOnnxModel();
  const std::string dir = ::testing::TempDir() + fmt::format("/spillway_export_{}", getpid());
  std::filesystem::create_directories(dir);
  const std::string checkpoint = dir + "/run.ckpt";
  const std::string out = dir + "/trained.onnx";
  const CommandResult trained =
      Spillway(fmt::format("train --onnx {} --loss cross-entropy --batch 2 --steps 2 --lr 0.5 "
                           "--threads 1 --max-evaluations 20 --save {}",
                           model, checkpoint));
  ASSERT_EQ(trained.exit_code, 0) << trained.out;
  const CommandResult exported = Spillway(
      fmt::format("export --onnx {} --loss cross-entropy --batch 2 --checkpoint {} --out {}", model,
                  checkpoint, out));
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  EXPECT_THAT(exported.out, HasSubstr("Exported 3 tensors"));
  EXPECT_THAT(exported.out, HasSubstr("(step 2)"));

  absl::StatusOr<spillway::train::Checkpoint> saved = spillway::train::ReadCheckpoint(checkpoint);
  ASSERT_TRUE(saved.ok()) << spillway::StatusMessage(saved.status());
  absl::StatusOr<spillway::onnx::ImportedModel> original =
      spillway::onnx::ImportModelFile(model, {});
  absl::StatusOr<spillway::onnx::ImportedModel> again = spillway::onnx::ImportModelFile(out, {});
  ASSERT_TRUE(original.ok() && again.ok());
  int compared = 0;
  for (const spillway::train::CheckpointTensor& tensor : saved->tensors) {
    if (!again->initial_values.contains(tensor.name)) continue;  // optimizer state
    EXPECT_EQ(again->initial_values.at(tensor.name), tensor.bytes) << tensor.name;
    EXPECT_NE(original->initial_values.at(tensor.name), tensor.bytes) << tensor.name;
    ++compared;
  }
  EXPECT_EQ(compared, 3);

  // A checkpoint of a built-in model is not this model's.
  const std::string other = dir + "/other.ckpt";
  ASSERT_EQ(Spillway("train --model resnet18 --image 32 --base-width 4 --steps 1 "
                     "--max-evaluations 20 --save " +
                     other)
                .exit_code,
            0);
  const std::string refused_out = dir + "/refused.onnx";
  const CommandResult refused = Spillway(fmt::format(
      "export --onnx {} --loss cross-entropy --checkpoint {} --out {}", model, other, refused_out));
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_THAT(refused.out,
              HasSubstr("has no tensor 'conv.weight': it was saved from another model"));
  EXPECT_FALSE(std::filesystem::exists(refused_out));
  std::filesystem::remove_all(dir);
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
  EXPECT_EQ(CountLines(run.out), 1) << run.out;
}

INSTANTIATE_TEST_SUITE_P(
    Errors, CliBadInput,
    ::testing::Values(
        BadInput{"inspect --model resnet51", "resnet51"},
        BadInput{"inspect --model resnet50 --batch 0", "batch"},
        BadInput{"inspect --model resnet50 --image -5",
                 "--image must be a positive integer, got '-5'"},
        BadInput{"inspect --model vgg16 --image 16", "too small"},
        BadInput{"inspect --model resnet50 --image 8000 --batch 2000000000000", "64-bit"},
        BadInput{"inspect --model resnet50 --image 224 --height 100", "--image"},
        BadInput{"inspect --model resnet50 --image lots", "lots"}, BadInput{"inspect", "--model"},
        BadInput{"frobnicate", "unknown command 'frobnicate'"},
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
        BadInput{"train --onnx m.onnx", "needs --loss cross-entropy"},
        BadInput{"plan --model resnet18 --solver-time-limit 5",
                 "--solver-time-limit applies to --policy optimal only"},
        BadInput{"plan --model resnet18 --policy optimal --write-model m.txt",
                 "name the file *.lp (LP form) or *.mps (MPS form)"},
        BadInput{"plan --model resnet18 --policy optimal --solver-time-limit 0",
                 "--solver-time-limit"},
        BadInput{"compare --model resnet18 --solver-time-limit 5",
                 "--solver-time-limit applies with --optimal only"},
        BadInput{"plan --model resnet152 --image 32 --policy optimal --budget 1GiB",
                 "at most 400 and 4000"},
        BadInput{"sweep --model resnet18 --from 120%", "--from '120%'"},
        BadInput{"sweep --model resnet18 --from 50% --to 40%", "--from 50% is above --to 40%"},
        BadInput{"sweep --model resnet18 --budgets 1GiB --points 3", "--points excludes --budgets"},
        BadInput{"sweep --model resnet18 --points 1", "--points 1 needs --from and --to equal"},
        BadInput{"sweep --model resnet18 --budgets lots", "--budgets 'lots'"},
        BadInput{"sweep --model resnet18 --budgets 1GiB,1GiB",
                 "the sweep has the budget 1.00 GiB twice"},
        BadInput{"sweep --model resnet18 --policy optimal", "--policy"},
        BadInput{"sweep --model resnet18 --policy swap,hybrid,swap", "--policy names swap twice"}));

// `spillway forward` on the tiny ONNX model, with an NCHW input from a .npy
// file, against the model computed here in ONNX's own order.
TEST(Cli, ForwardRunsAnOnnxModelOnAnNpyInput) {
  const std::string model = WriteTinyOnnxModel();
  constexpr int64_t kN = 2, kC = 3, kH = 8, kW = 8, kO = 4, kClasses = 5;
  std::vector<float> images(kN * kC * kH * kW);
  for (size_t i = 0; i < images.size(); ++i) {
    images[i] = static_cast<float>((i * 37) % 11) * 0.1f - 0.5f;
  }
  const std::string dir = fmt::format("{}/spillway_cli_forward_{}", ::testing::TempDir(), getpid());
  const std::string input = dir + ".npy";
  const std::vector<int64_t> shape = {kN, kC, kH, kW};
  ASSERT_TRUE(spillway::WriteNpyFile(input, spillway::NpyDType::kF32, shape,
                                     std::as_bytes(std::span(images)))
                  .ok());
  const CommandResult run = Spillway(
      fmt::format("forward --onnx {} --input images={} --output-dir {} --json", model, input, dir));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["parameters"].get<int64_t>(), 4 * 3 * 3 * 3 + 5 * 4 + 5);
  ASSERT_EQ(report["outputs"].size(), 1u);
  const nlohmann::json& output = report["outputs"][0];
  EXPECT_EQ(output["shape"], nlohmann::json::array({kN, kClasses}));
  EXPECT_EQ(output["dtype"], "f32");
  EXPECT_EQ(report["inputs"][0]["source"], input);
  absl::StatusOr<spillway::NpyArray> logits =
      spillway::ReadNpyFile(output["file"].get<std::string>());
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->data.size(), kN * kClasses * sizeof(float));
  std::vector<float> got(kN * kClasses);
  std::memcpy(got.data(), logits->data.data(), logits->data.size());

  // The weights WriteTinyOnnxModel stores: 0.01 * (flat index % 7), OIHW.
  auto weight = [](int64_t index) { return 0.01 * static_cast<double>(index % 7); };
  double largest = 0;
  for (int64_t n = 0; n < kN; ++n) {
    std::vector<double> pooled(kO, 0.0);
    for (int64_t o = 0; o < kO; ++o) {
      for (int64_t y = 0; y < kH; ++y) {
        for (int64_t x = 0; x < kW; ++x) {
          double sum = 0;
          for (int64_t c = 0; c < kC; ++c) {
            for (int64_t ky = 0; ky < 3; ++ky) {
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y + ky - 1, ix = x + kx - 1;
                if (iy < 0 || iy >= kH || ix < 0 || ix >= kW) continue;
                sum += weight(((o * kC + c) * 3 + ky) * 3 + kx) *
                       images[static_cast<size_t>(((n * kC + c) * kH + iy) * kW + ix)];
              }
            }
          }
          pooled[static_cast<size_t>(o)] += std::max(sum, 0.0) / (kH * kW);
        }
      }
    }
    for (int64_t j = 0; j < kClasses; ++j) {
      double logit = weight(j);  // fc.bias
      for (int64_t o = 0; o < kO; ++o) logit += weight(j * kO + o) * pooled[static_cast<size_t>(o)];
      largest = std::max(largest, std::abs(logit));
      EXPECT_NEAR(got[static_cast<size_t>(n * kClasses + j)], logit, 1e-5) << n << "," << j;
    }
  }
  EXPECT_GT(largest, 0.01);

  const CommandResult text = Spillway(fmt::format("forward --onnx {}", model));
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("images: seed 0 (uniform values; give it with --input)"));
  EXPECT_THAT(text.out, HasSubstr("Output     logits [2,5] f32: mean"));
}

TEST(Cli, ForwardRunsABuiltInModelWithSeededParameters) {
  const CommandResult run = Spillway("forward --model resnet18 --batch 2 --image 32 --json");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  ASSERT_EQ(report["outputs"].size(), 1u);
  // Cross-entropy of near-uniform logits over 1000 classes: about ln(1000).
  EXPECT_NEAR(report["outputs"][0]["mean"].get<double>(), std::log(1000.0), 1.0);
  EXPECT_EQ(report["inputs"][1]["name"], "labels");
  EXPECT_EQ(report["inputs"][1]["source"], "seed 0");
}

TEST(Cli, ForwardInputErrorsSayWhatWasExpected) {
  const std::string model = WriteTinyOnnxModel();
  const std::string input =
      fmt::format("{}/spillway_cli_forward_bad_{}.npy", ::testing::TempDir(), getpid());
  const std::vector<float> values(2 * 3 * 8 * 4);
  const std::vector<int64_t> shape = {2, 3, 8, 4};
  ASSERT_TRUE(spillway::WriteNpyFile(input, spillway::NpyDType::kF32, shape,
                                     std::as_bytes(std::span(values)))
                  .ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--input pictures=" + input, "the model has no input 'pictures'; its inputs are images"},
      {"--input images=" + input,
       "input 'images' is [2,3,8,8] f32 (ONNX order); " + input + " holds [2,3,8,4] float32"},
      {"--input images=/nonexistent/x.npy", "cannot open .npy file '/nonexistent/x.npy'"},
      {"--input images", "expected NAME=FILE.npy"},
      {"--input images=" + model, "not a NumPy .npy file"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult run = Spillway(fmt::format("forward --onnx {} {}", model, args));
    EXPECT_EQ(run.exit_code, 2) << run.out;
    EXPECT_THAT(run.out, HasSubstr("spillway: error: "));
    EXPECT_THAT(run.out, HasSubstr(message));
  }
}

}  // namespace
