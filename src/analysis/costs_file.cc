#include "analysis/costs_file.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "analysis/hardware.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/check.h"
#include "support/file_io.h"
#include "support/json_text.h"
#include "support/status_macros.h"

namespace spillway::analysis {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kFormat = "spillway-costs";
constexpr int kVersion = 1;
constexpr int64_t kMaxCostsFileBytes = int64_t{64} << 20;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

absl::StatusOr<const Json*> Field(const Json& object, std::string_view name, std::string_view path,
                                  Json::value_t type) {
  const std::string key(name);
  if (!object.is_object() || !object.contains(key)) {
    return Invalid(fmt::format("field '{}{}' is missing", path, name));
  }
  const Json& value = object.at(key);
  const bool matches = type == Json::value_t::number_float     ? value.is_number()
                       : type == Json::value_t::number_integer ? value.is_number_integer()
                                                               : value.type() == type;
  if (!matches) {
    return Invalid(fmt::format("field '{}{}' has the wrong type: {}", path, name,
                               std::string(value.type_name())));
  }
  return &value;
}

// A finite number >= 0; `what` names it in the error ("number of seconds").
absl::StatusOr<double> NonNegative(const Json& value, std::string_view path,
                                   std::string_view what = "number") {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
    return Invalid(
        fmt::format("field '{}' must be a finite {} >= 0, got {}", path, what, value.dump()));
  }
  return value.get<double>();
}

absl::StatusOr<double> Seconds(const Json& value, std::string_view path) {
  return NonNegative(value, path, "number of seconds");
}

absl::StatusOr<std::vector<MeasuredCosts::CopySample>> Samples(const Json& copies,
                                                               std::string_view direction) {
  ASSIGN_OR_RETURN(const Json* list, Field(copies, direction, "copies.", Json::value_t::array));
  std::vector<MeasuredCosts::CopySample> samples;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = fmt::format("copies.{}.{}", direction, i);
    const Json& sample = list->at(i);
    ASSIGN_OR_RETURN(const Json* bytes,
                     Field(sample, "bytes", path + ".", Json::value_t::number_integer));
    ASSIGN_OR_RETURN(const Json* seconds,
                     Field(sample, "seconds", path + ".", Json::value_t::number_float));
    if (bytes->get<int64_t>() < 0) {
      return Invalid(fmt::format("field '{}.bytes' must be >= 0", path));
    }
    ASSIGN_OR_RETURN(const double time, Seconds(*seconds, path + ".seconds"));
    samples.push_back({bytes->get<int64_t>(), time});
  }
  int64_t sizes = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i == 0 || samples[i].bytes != samples[i - 1].bytes) ++sizes;
  }
  if (sizes < 2) {
    return Invalid(fmt::format(
        "field 'copies.{}' needs samples of at least two sizes to fit a line", direction));
  }
  return samples;
}

}  // namespace

absl::StatusOr<MeasuredCosts> ParseCostsFile(std::string_view json_text) {
  ASSIGN_OR_RETURN(const Json root, ParseStrictJson(json_text));
  if (!root.is_object()) return Invalid("a costs file is a JSON object");
  ASSIGN_OR_RETURN(const Json* format, Field(root, "format", "", Json::value_t::string));
  if (format->get<std::string>() != kFormat) {
    return Invalid(fmt::format("field 'format' must be \"{}\", got {}: not a costs file", kFormat,
                               format->dump()));
  }
  ASSIGN_OR_RETURN(const Json* version, Field(root, "version", "", Json::value_t::number_integer));
  if (version->get<int64_t>() != kVersion) {
    return Invalid(fmt::format("field 'version' is {}; this Spillway reads version {}",
                               version->dump(), kVersion));
  }
  MeasuredCosts costs;
  ASSIGN_OR_RETURN(const Json* on, Field(root, "measured_on", "", Json::value_t::object));
  for (auto [name, field] :
       {std::pair{"machine", &costs.measured_on.machine},
        std::pair{"backend", &costs.measured_on.backend}, std::pair{"isa", &costs.measured_on.isa},
        std::pair{"date", &costs.measured_on.date}}) {
    ASSIGN_OR_RETURN(const Json* value, Field(*on, name, "measured_on.", Json::value_t::string));
    *field = value->get<std::string>();
  }
  ASSIGN_OR_RETURN(const Json* threads,
                   Field(*on, "threads", "measured_on.", Json::value_t::number_integer));
  if (threads->get<int64_t>() < 1 || threads->get<int64_t>() > 1 << 20) {
    return Invalid("field 'measured_on.threads' must be a positive thread count");
  }
  costs.measured_on.threads = static_cast<int>(threads->get<int64_t>());
  if (on->contains("math_mode")) {
    ASSIGN_OR_RETURN(const Json* mode,
                     Field(*on, "math_mode", "measured_on.", Json::value_t::string));
    if (!ParseMathMode(mode->get<std::string>()).has_value()) {
      return Invalid(
          fmt::format("field 'measured_on.math_mode' is {}: fp32, tf32 or fp16", mode->dump()));
    }
    costs.measured_on.math_mode = mode->get<std::string>();
  }
  ASSIGN_OR_RETURN(const Json* workload, Field(root, "workload", "", Json::value_t::string));
  costs.workload = workload->get<std::string>();
  ASSIGN_OR_RETURN(const Json* nodes, Field(root, "nodes", "", Json::value_t::object));
  for (const auto& [name, seconds] : nodes->items()) {
    ASSIGN_OR_RETURN(costs.node_seconds[name], Seconds(seconds, "nodes." + name));
  }
  ASSIGN_OR_RETURN(const Json* copies, Field(root, "copies", "", Json::value_t::object));
  ASSIGN_OR_RETURN(costs.device_to_host, Samples(*copies, "device_to_host"));
  ASSIGN_OR_RETURN(costs.host_to_device, Samples(*copies, "host_to_device"));
  if (root.contains("contention")) {
    ASSIGN_OR_RETURN(const Json* contention, Field(root, "contention", "", Json::value_t::object));
    Contention& slowdowns = costs.contention.emplace();
    for (auto [name, field] : {std::pair{"compute_slowdown", &slowdowns.compute_slowdown},
                               std::pair{"copy_slowdown", &slowdowns.copy_slowdown}}) {
      ASSIGN_OR_RETURN(const Json* value,
                       Field(*contention, name, "contention.", Json::value_t::number_float));
      ASSIGN_OR_RETURN(*field, NonNegative(*value, fmt::format("contention.{}", name)));
    }
  }
  return costs;
}

std::string CostsFileToJson(const MeasuredCosts& costs) {
  nlohmann::ordered_json json;
  json["format"] = kFormat;
  json["version"] = kVersion;
  json["measured_on"] = {
      {"machine", costs.measured_on.machine},     {"backend", costs.measured_on.backend},
      {"threads", costs.measured_on.threads},     {"isa", costs.measured_on.isa},
      {"math_mode", costs.measured_on.math_mode}, {"date", costs.measured_on.date}};
  json["workload"] = costs.workload;
  json["nodes"] = nlohmann::ordered_json::object();
  for (const auto& [name, seconds] : costs.node_seconds) json["nodes"][name] = seconds;
  for (auto [name, samples] : {std::pair{"device_to_host", &costs.device_to_host},
                               std::pair{"host_to_device", &costs.host_to_device}}) {
    nlohmann::ordered_json& list = json["copies"][name] = nlohmann::ordered_json::array();
    for (const MeasuredCosts::CopySample& sample : *samples) {
      list.push_back({{"bytes", sample.bytes}, {"seconds", sample.seconds}});
    }
  }
  if (costs.contention) {
    json["contention"] = {{"compute_slowdown", costs.contention->compute_slowdown},
                          {"copy_slowdown", costs.contention->copy_slowdown}};
  }
  return json.dump(2) + "\n";
}

absl::StatusOr<MeasuredCosts> LoadCostsFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text,
                   ReadFileToString(path, kMaxCostsFileBytes, "costs file"));
  absl::StatusOr<MeasuredCosts> costs = ParseCostsFile(text);
  if (!costs.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("costs file '{}': {}", path, StatusMessage(costs.status())));
  }
  return costs;
}

CopyLine FitCopyLine(const std::vector<MeasuredCosts::CopySample>& samples) {
  SPILLWAY_CHECK(!samples.empty(), "a copy line needs samples");
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const MeasuredCosts::CopySample& sample : samples) {
    const double x = static_cast<double>(sample.bytes);
    n += 1;
    sx += x;
    sy += sample.seconds;
    sxx += x * x;
    sxy += x * sample.seconds;
  }
  const double denominator = n * sxx - sx * sx;
  double slope = denominator > 0 ? (n * sxy - sx * sy) / denominator : 0;
  double intercept = (sy - slope * sx) / n;
  if (intercept < 0) {  // through the origin instead
    intercept = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
  }
  // A line with no slope (copies too small or too noisy to see bandwidth)
  // would make every copy free of its bytes: take the fastest sample's rate.
  if (!(slope > 0)) {
    double fastest = 0;
    for (const MeasuredCosts::CopySample& sample : samples) {
      if (sample.seconds > 0) {
        fastest = std::max(fastest, static_cast<double>(sample.bytes) / sample.seconds);
      }
    }
    slope = fastest > 0 ? 1.0 / fastest : 1e-12;
  }
  return {.latency_s = intercept, .bytes_per_s = 1.0 / slope};
}

absl::StatusOr<MeasuredCostModel> MakeMeasuredCostModel(const MeasuredCosts& costs,
                                                        const ir::Graph& graph,
                                                        std::unique_ptr<const CostModel> fallback) {
  SPILLWAY_CHECK(fallback != nullptr, "a measured cost model needs a fallback");
  MeasuredCostModel result;
  std::vector<std::optional<double>> node_seconds(static_cast<size_t>(graph.num_nodes()));
  for (const ir::Node& node : graph.nodes()) {
    auto it = costs.node_seconds.find(node.name);
    if (it == costs.node_seconds.end()) {
      ++result.unmatched;
      continue;
    }
    node_seconds[static_cast<size_t>(node.id)] = it->second;
    ++result.matched;
  }
  if (2 * result.matched < graph.num_nodes()) {
    return absl::InvalidArgumentError(fmt::format(
        "the costs file times {} of this graph's {} nodes: it was measured on another graph "
        "({}); profile this workload",
        result.matched, graph.num_nodes(), costs.workload));
  }
  result.model = std::make_unique<TabulatedCostModel>(
      std::move(node_seconds), std::move(fallback),
      TabulatedCostModel::CopyLines{.to_host = FitCopyLine(costs.device_to_host),
                                    .to_device = FitCopyLine(costs.host_to_device)},
      costs.contention);
  return result;
}

}  // namespace spillway::analysis
