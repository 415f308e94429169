// `spillway profile`: times every node of a workload's training step on a
// real backend, its copies each way, and how much copies and kernels slow
// each other when they overlap, and writes a costs file that `plan --costs`
// and `compare --costs` plan with (analysis/costs_file.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
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

// Runs `warmup` training steps, then `timed` steps timing every node (and
// more while `more` says so, up to 1000), and gives each node's median over
// the timed steps (nullopt for nodes never timed).
absl::StatusOr<std::vector<std::optional<double>>> NodeMedians(
    train::Trainer& trainer, int warmup, int timed, std::string_view what,
    const std::function<bool()>& more = nullptr) {
  constexpr int kMaxTimed = 1000;
  const size_t nodes = static_cast<size_t>(trainer.training().graph.num_nodes());
  std::vector<std::vector<double>> samples(nodes);
  for (int s = 0; s < warmup + timed || (more && more() && s < warmup + kMaxTimed); ++s) {
    const bool counted = s >= warmup;
    fmt::print(std::cerr, "profile: {}step {} of {}{}\n", what, s + 1,
               std::max(s + 1, warmup + timed), counted ? "" : " (warm-up)");
    ASSIGN_OR_RETURN(const train::StepStats stats, trainer.Step(/*time_nodes=*/true));
    if (!counted) continue;
    for (size_t id = 0; id < stats.result.node_seconds.size(); ++id) {
      if (stats.result.node_seconds[id] >= 0) samples[id].push_back(stats.result.node_seconds[id]);
    }
  }
  std::vector<std::optional<double>> medians(nodes);
  for (size_t id = 0; id < nodes; ++id) {
    if (!samples[id].empty()) medians[id] = Median(std::move(samples[id]));
  }
  return medians;
}

double Sum(const std::vector<std::optional<double>>& seconds) {
  double sum = 0;
  for (const std::optional<double>& s : seconds) sum += s.value_or(0);
  return sum;
}

// A device buffer and a host buffer of the same size, from the backend.
class CopyBuffers {
 public:
  static absl::StatusOr<CopyBuffers> Allocate(backends::Backend& backend, int64_t bytes) {
    ASSIGN_OR_RETURN(void* device, backend.AllocateDevice(bytes));
    absl::StatusOr<void*> host = backend.AllocateHost(bytes);
    if (!host.ok()) {
      backend.FreeDevice(device);
      return host.status();
    }
    CopyBuffers buffers(backend, device, *host);
    // Both filled, so that no copy reads memory never written.
    const std::vector<std::byte> pattern(static_cast<size_t>(bytes), std::byte{1});
    RETURN_IF_ERROR(backend.Upload(device, pattern.data(), bytes));
    RETURN_IF_ERROR(backend.Download(*host, device, bytes));
    return buffers;
  }
  CopyBuffers(CopyBuffers&& other) noexcept
      : backend_(other.backend_),
        device_(std::exchange(other.device_, nullptr)),
        host_(std::exchange(other.host_, nullptr)) {}
  CopyBuffers(const CopyBuffers&) = delete;
  CopyBuffers& operator=(const CopyBuffers&) = delete;
  CopyBuffers& operator=(CopyBuffers&&) = delete;
  ~CopyBuffers() {
    if (device_ != nullptr) backend_.FreeDevice(device_);
    if (host_ != nullptr) backend_.FreeHost(host_);
  }

  // One copy through the backend's stream for that direction, waited for;
  // its wall time.
  absl::StatusOr<double> TimeCopy(bool to_host, int64_t bytes) {
    const program::Stream stream =
        to_host ? program::Stream::kDeviceToHost : program::Stream::kHostToDevice;
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(to_host ? backend_.Copy(stream, host_, device_, bytes)
                            : backend_.Copy(stream, device_, host_, bytes));
    RETURN_IF_ERROR(backend_.SynchronizeStream(stream));
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  CopyBuffers(backends::Backend& backend, void* device, void* host)
      : backend_(backend), device_(device), host_(host) {}
  backends::Backend& backend_;
  void* device_;
  void* host_;
};

constexpr int64_t kLargestCopy = int64_t{64} << 20;

// Copies of 4 KiB to 64 MiB each way through the backend's copy streams,
// the median of `repeats` of each size.
absl::Status MeasureCopies(CopyBuffers& buffers, int repeats, analysis::MeasuredCosts& costs) {
  for (int64_t bytes = 4 << 10; bytes <= kLargestCopy; bytes *= 4) {
    for (const bool to_host : {true, false}) {
      std::vector<double> samples;
      for (int r = 0; r < repeats; ++r) {
        ASSIGN_OR_RETURN(samples.emplace_back(), buffers.TimeCopy(to_host, bytes));
      }
      (to_host ? costs.device_to_host : costs.host_to_device)
          .push_back({bytes, Median(std::move(samples))});
    }
  }
  return absl::OkStatus();
}

// How much copies and kernels slow each other on this backend: the step's
// nodes are timed again while another thread copies 64 MiB out and back
// without pause, as a copy stream would, and those copies are timed against
// the same copies alone (the costs' largest samples). At least `repeats`
// steps, and more until three copies have ended during them.
absl::StatusOr<analysis::Contention> MeasureContention(train::Trainer& trainer,
                                                       CopyBuffers& buffers, int repeats,
                                                       double kernels_alone_s,
                                                       const analysis::MeasuredCosts& costs) {
  const double to_host_alone_s = costs.device_to_host.back().seconds;
  const double to_device_alone_s = costs.host_to_device.back().seconds;
  std::atomic<bool> stop = false;
  std::atomic<int> copies_ended = 0;  // during the steps
  std::atomic<bool> copy_failed = false;
  std::vector<double> ratios;  // the copier's: a copy's time over its time alone
  absl::Status copy_status;    // the copier's
  std::thread copier([&] {
    for (bool to_host = true; !stop.load(); to_host = !to_host) {
      absl::StatusOr<double> seconds = buffers.TimeCopy(to_host, kLargestCopy);
      if (!seconds.ok()) {
        copy_status = seconds.status();
        copy_failed = true;
        return;
      }
      if (stop.load()) return;  // it ended after the steps
      ratios.push_back(*seconds / (to_host ? to_host_alone_s : to_device_alone_s));
      ++copies_ended;
    }
  });
  absl::StatusOr<std::vector<std::optional<double>>> beside_copies =
      NodeMedians(trainer, /*warmup=*/0, repeats, "beside copies, ",
                  [&] { return copies_ended.load() < 3 && !copy_failed.load(); });
  stop = true;
  copier.join();
  RETURN_IF_ERROR(copy_status);
  RETURN_IF_ERROR(beside_copies.status());
  analysis::Contention contention;
  if (kernels_alone_s > 0) {
    contention.compute_slowdown = std::max(0.0, Sum(*beside_copies) / kernels_alone_s - 1);
  }
  if (!ratios.empty()) contention.copy_slowdown = std::max(0.0, Median(ratios) - 1);
  return contention;
}

}  // namespace

CommandRunner AddProfileCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "profile",
      "Time every node of a workload's training step, the copies each way and how much copies "
      "and kernels slow each other on the CPU backend, and write a costs file for plan --costs, "
      "compare --costs and train --costs");
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
    ASSIGN_OR_RETURN(const std::vector<std::optional<double>> alone,
                     NodeMedians(*trainer, flags->warmup, flags->repeats, ""));
    analysis::MeasuredCosts costs;
    costs.measured_on.machine = MachineName();
    costs.measured_on.backend = flags->backend.backend;
    costs.measured_on.threads = flags->backend.threads;
    costs.measured_on.isa = session::DirectKernelPath(flags->backend);
    if (costs.measured_on.isa.empty()) costs.measured_on.isa = "unknown";
    costs.measured_on.math_mode = flags->backend.math_mode;
    costs.measured_on.date = Today();
    costs.workload = session::DescribeWorkload(flags->workload);
    for (const ir::Node& node : graph.nodes()) {
      const std::optional<double>& median = alone[static_cast<size_t>(node.id)];
      if (median) costs.node_seconds[node.name] = *median;
    }
    const double step_s = Sum(alone);
    fmt::print(std::cerr, "profile: copies each way, 4 KiB to 64 MiB\n");
    ASSIGN_OR_RETURN(CopyBuffers buffers, CopyBuffers::Allocate(*backend, kLargestCopy));
    RETURN_IF_ERROR(MeasureCopies(buffers, flags->repeats, costs));
    ASSIGN_OR_RETURN(costs.contention,
                     MeasureContention(*trainer, buffers, flags->repeats, step_s, costs));
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
    fmt::print(out,
               "Contention   a copy slows kernels by {:.0f}%, a kernel slows copies by {:.0f}% "
               "(while they overlap)\n",
               100 * costs.contention->compute_slowdown, 100 * costs.contention->copy_slowdown);
    fmt::print(out, "Costs file   {}\n", flags->out);
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
