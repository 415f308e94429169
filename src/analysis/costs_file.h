// Measured costs: what `spillway profile` timed on a real backend, in a JSON
// file that `--costs` gives back to the planner and the simulator. (A
// *hardware profile* describes a machine; a *costs file* holds measured times.)
//
//   {"format": "spillway-costs", "version": 1,
//    "measured_on": {"machine": ..., "backend": "cpu", "threads": 2,
//                    "isa": "avx2", "date": "2026-12-04"},
//    "workload": "resnet18, batch 8, 224x224",
//    "nodes": {"conv1": 0.0123, ...},               (median seconds, by node name)
//    "copies": {"device_to_host": [{"bytes": 4096, "seconds": 2e-6}, ...],
//               "host_to_device": [...]},
//    "contention": {"compute_slowdown": 0.4, "copy_slowdown": 0.9}}  (optional)
//
// Nodes are keyed by name, so a recomputed node (the same node run again)
// finds its original's time; copies are fitted by a line, latency plus bytes
// over bandwidth, per direction. `contention` says how much a running copy
// slows a kernel and a running kernel slows a copy (analysis::Contention);
// a file without it plans copies and kernels as independent.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/cost_model.h"
#include "ir/graph.h"

namespace spillway::analysis {

struct MeasuredCosts {
  struct Configuration {
    std::string machine;  // the host's name and CPU model, as the profiler saw them
    std::string backend;  // "cpu"
    int threads = 0;
    std::string isa;  // the CPU backend's kernel path ("avx2", "avx512", "generic")
    // The math the kernels ran in ("fp32", "tf32"); a file without it was
    // measured in fp32, the only mode before it was recorded.
    std::string math_mode = "fp32";
    std::string date;
    bool operator==(const Configuration&) const = default;
  };
  struct CopySample {
    int64_t bytes = 0;
    double seconds = 0;
  };
  Configuration measured_on;
  std::string workload;
  std::map<std::string, double> node_seconds;
  std::vector<CopySample> device_to_host;
  std::vector<CopySample> host_to_device;
  std::optional<Contention> contention;
};

// Errors name the field: a wrong format or version, a negative or non-finite
// time, a copy of negative size, fewer than two copy sizes a direction, a
// negative or non-finite slowdown.
absl::StatusOr<MeasuredCosts> ParseCostsFile(std::string_view json_text);
std::string CostsFileToJson(const MeasuredCosts& costs);
// Reads and parses (at most 64 MiB); errors start with the path.
absl::StatusOr<MeasuredCosts> LoadCostsFile(const std::string& path);

// A copy line fitted to samples by least squares (the latency clamped at
// zero: refitted through the origin if it would be below).
CopyLine FitCopyLine(const std::vector<MeasuredCosts::CopySample>& samples);

// The cost model a costs file gives a graph: each node its measured time by
// name, and copies their fitted lines; `fallback` times the nodes the file
// does not have, and contention is the file's. Refuses (one line) a file that has times for fewer
// than half of the graph's nodes: it was measured on another graph.
struct MeasuredCostModel {
  std::unique_ptr<CostModel> model;
  int matched = 0;    // nodes timed from the file
  int unmatched = 0;  // nodes left to the fallback
};
absl::StatusOr<MeasuredCostModel> MakeMeasuredCostModel(const MeasuredCosts& costs,
                                                        const ir::Graph& graph,
                                                        std::unique_ptr<const CostModel> fallback);

}  // namespace spillway::analysis
