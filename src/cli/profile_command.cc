// `spillway profile`: times every node of a workload's training step on a
// real backend, and its copies each way, and writes a costs file that
// `plan --costs` and `compare --costs` plan with (analysis/costs_file.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "analysis/costs_file.h"
#include "analysis/hardware.h"
#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/option_validators.h"
#include "cli/workload_flags.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "support/file_io.h"
#include "support/status_macros.h"
#include "support/units.h"
#include "train/trainer.h"

namespace spillway::cli {
namespace {

struct ProfileFlags {
  WorkloadFlags workload;
  BackendFlags backend;
  std::string optimizer = "sgd";
  int warmup = 1;
  int repeats = 5;
  std::string out;
};

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

// The host's name and CPU model.
std::string MachineName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  return fmt::format("{} ({})", host, model);
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  return fmt::format("{:04}-{:02}-{:02}", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday);
}

// Copies of 4 KiB to 64 MiB each way through the backend's copy streams,
// the median of `repeats` of each size.
absl::Status MeasureCopies(backends::Backend& backend, int repeats,
                           analysis::MeasuredCosts& costs) {
  constexpr int64_t kLargest = int64_t{64} << 20;
  ASSIGN_OR_RETURN(void* device, backend.AllocateDevice(kLargest));
  absl::StatusOr<void*> host = backend.AllocateHost(kLargest);
  if (!host.ok()) {
    backend.FreeDevice(device);
    return host.status();
  }
  std::vector<std::byte> pattern(static_cast<size_t>(kLargest), std::byte{1});
  absl::Status status = backend.Upload(device, pattern.data(), kLargest);
  for (int64_t bytes = 4 << 10; status.ok() && bytes <= kLargest; bytes *= 4) {
    for (const bool to_host : {true, false}) {
      const program::Stream stream =
          to_host ? program::Stream::kDeviceToHost : program::Stream::kHostToDevice;
      std::vector<double> samples;
      for (int r = 0; r < repeats && status.ok(); ++r) {
        const Clock::time_point start = Clock::now();
        status = to_host ? backend.Copy(stream, *host, device, bytes)
                         : backend.Copy(stream, device, *host, bytes);
        if (status.ok()) status = backend.SynchronizeStream(stream);
        samples.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
      if (!status.ok()) break;
      (to_host ? costs.device_to_host : costs.host_to_device)
          .push_back({bytes, Median(std::move(samples))});
    }
  }
  backend.FreeHost(*host);
  backend.FreeDevice(device);
  return status;
}

}  // namespace

CommandRunner AddProfileCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "profile",
      "Time every node of a workload's training step and the copies each way on the CPU "
      "backend, and write a costs file for plan --costs and compare --costs");
  auto flags = std::make_shared<ProfileFlags>();
  AddWorkloadFlags(*command, flags->workload);
  AddBackendFlags(*command, flags->backend);
  command->add_option("--optimizer", flags->optimizer, "Optimizer whose updates the step runs")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  command->add_option("--warmup", flags->warmup, "Steps run first and not timed")
      ->check(NonNegativeInteger())
      ->capture_default_str();
  command
      ->add_option("--repeats", flags->repeats,
                   "Timed steps; each node's time is its median over them")
      ->check(Integer(1, 1000))
      ->capture_default_str();
  command->add_option("--out", flags->out, "The costs file to write (JSON, docs/hardware.md)")
      ->check(NotEmpty())
      ->required();
  return [command, flags](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    if (flags->backend.backend != "cpu") {
      return absl::InvalidArgumentError(
          fmt::format("profile runs on the CPU backend only (--backend cpu), not '{}'",
                      flags->backend.backend));
    }
    RETURN_IF_ERROR(CheckOutputPath(flags->out, "costs file"));
    ASSIGN_OR_RETURN(const session::Workload workload, session::BuildWorkload(flags->workload));
    train::TrainerOptions options;
    options.optimizer.kind = flags->optimizer == "adamw" ? autodiff::OptimizerKind::kAdam
                                                         : autodiff::OptimizerKind::kSgd;
    if (options.optimizer.kind == autodiff::OptimizerKind::kAdam) options.optimizer.lr = 1e-3;
    // Everything kept: each node runs once, as written.
    options.policy = "none";
    ASSIGN_OR_RETURN(options.hardware, analysis::LoadHardwareProfile("cpu"));
    options.budget_bytes = ir::kMaxGraphBytes;
    options.data.seed = static_cast<uint64_t>(flags->workload.options.seed);
    options.initial_values = &workload.initial_values;
    ASSIGN_OR_RETURN(const std::unique_ptr<backends::Backend> backend,
                     session::MakeBackend(flags->backend));
    ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer,
                     train::Trainer::Create(workload.graph, options, *backend));

    const ir::Graph& graph = trainer->training().graph;
    std::vector<std::vector<double>> samples(static_cast<size_t>(graph.num_nodes()));
    const int steps = flags->warmup + flags->repeats;
    for (int s = 0; s < steps; ++s) {
      const bool timed = s >= flags->warmup;
      fmt::print(std::cerr, "profile: step {} of {}{}\n", s + 1, steps, timed ? "" : " (warm-up)");
      ASSIGN_OR_RETURN(const train::StepStats stats, trainer->Step(/*time_nodes=*/true));
      if (!timed) continue;
      for (size_t id = 0; id < stats.result.node_seconds.size(); ++id) {
        if (stats.result.node_seconds[id] >= 0)
          samples[id].push_back(stats.result.node_seconds[id]);
      }
    }
    analysis::MeasuredCosts costs;
    costs.measured_on.machine = MachineName();
    costs.measured_on.backend = flags->backend.backend;
    costs.measured_on.threads = flags->backend.threads;
    costs.measured_on.isa = session::DirectKernelPath(flags->backend);
    if (costs.measured_on.isa.empty()) costs.measured_on.isa = "unknown";
    costs.measured_on.date = Today();
    costs.workload = session::DescribeWorkload(flags->workload);
    double step_s = 0;
    for (const ir::Node& node : graph.nodes()) {
      std::vector<double>& times = samples[static_cast<size_t>(node.id)];
      if (times.empty()) continue;
      const double median = Median(std::move(times));
      costs.node_seconds[node.name] = median;
      step_s += median;
    }
    fmt::print(std::cerr, "profile: copies each way, 4 KiB to 64 MiB\n");
    RETURN_IF_ERROR(MeasureCopies(*backend, flags->repeats, costs));
    RETURN_IF_ERROR(
        WriteFileAtomically(flags->out, analysis::CostsFileToJson(costs), "costs file"));
    const analysis::CopyLine to_host = analysis::FitCopyLine(costs.device_to_host);
    const analysis::CopyLine to_device = analysis::FitCopyLine(costs.host_to_device);
    fmt::print(out, "Workload     {}\n", costs.workload);
    fmt::print(out, "Backend      {}\n", session::DescribeBackend(flags->backend));
    fmt::print(out, "Nodes        {} timed, median of {} steps: {:.4g} s of kernels per step\n",
               costs.node_seconds.size(), flags->repeats, step_s);
    fmt::print(out, "Copies       to host {:.3g} GB/s + {:.3g} us, back {:.3g} GB/s + {:.3g} us\n",
               to_host.bytes_per_s / 1e9, to_host.latency_s * 1e6, to_device.bytes_per_s / 1e9,
               to_device.latency_s * 1e6);
    fmt::print(out, "Costs file   {}\n", flags->out);
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
