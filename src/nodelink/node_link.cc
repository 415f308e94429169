#include "nodelink/node_link.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/file_io.h"
#include "support/json_text.h"
#include "support/status_macros.h"

namespace spillway::nodelink {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// A JSON value as it appears in a message, cut short.
std::string Quote(const Json& value) {
  constexpr size_t kMaxChars = 40;
  std::string text = value.dump();
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

// Node ids may be strings or integers (networkx writes either); the IR names
// a node by the id's text, so "7" and 7 are the same id.
absl::StatusOr<std::string> IdText(const Json& id, std::string_view where) {
  if (id.is_string()) {
    if (id.get<std::string>().empty()) return Invalid(fmt::format("{}: an empty id", where));
    return id.get<std::string>();
  }
  if (id.is_number_integer()) return id.dump();
  return Invalid(fmt::format("{}: an id must be a string or an integer, got {}", where, Quote(id)));
}

// The graph attribute `key` as a string, or the fallback.
absl::StatusOr<std::string> GraphString(const Json& attrs, std::string_view key,
                                        const std::optional<std::string>& given,
                                        std::string fallback) {
  if (given.has_value()) return *given;
  if (!attrs.contains(key)) return fallback;
  const Json& value = attrs.at(std::string(key));
  if (!value.is_string() || value.get<std::string>().empty()) {
    return Invalid(
        fmt::format("graph attribute '{}' must be a non-empty string, got {}", key, Quote(value)));
  }
  return value.get<std::string>();
}

absl::StatusOr<double> SecondsPerUnit(std::string_view unit) {
  if (unit == "s") return 1.0;
  if (unit == "ms") return 1e-3;
  if (unit == "us") return 1e-6;
  return Invalid(fmt::format("time unit \"{}\" is not s, ms or us", unit));
}

// A list of node ids in a graph attribute, as positions in the node list.
absl::StatusOr<std::vector<int>> IdList(const Json& attrs, std::string_view key,
                                        const absl::flat_hash_map<std::string, int>& position) {
  const Json& list = attrs.at(std::string(key));
  if (!list.is_array()) {
    return Invalid(fmt::format("graph attribute '{}' must be a list of node ids", key));
  }
  std::vector<int> positions;
  for (const Json& id : list) {
    ASSIGN_OR_RETURN(std::string text, IdText(id, fmt::format("graph attribute '{}'", key)));
    auto it = position.find(text);
    if (it == position.end()) {
      return Invalid(
          fmt::format("graph attribute '{}' names '{}', which is not a node", key, text));
    }
    positions.push_back(it->second);
  }
  return positions;
}

struct FileNode {
  std::string id;
  double seconds = 0;
  int64_t bytes = 0;
  std::optional<ir::Phase> phase;
  std::vector<int> predecessors;  // positions, in link order, each once
};

absl::StatusOr<double> ReadDuration(const Json& node, const std::string& id,
                                    const std::string& attr, double seconds_per_unit) {
  if (!node.contains(attr)) {
    return Invalid(fmt::format("node '{}': missing attribute '{}' (its duration)", id, attr));
  }
  const Json& value = node.at(attr);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
    return Invalid(fmt::format("node '{}': duration '{}' must be a non-negative number, got {}", id,
                               attr, Quote(value)));
  }
  return value.get<double>() * seconds_per_unit;
}

absl::StatusOr<int64_t> ReadSize(const Json& node, const std::string& id, const std::string& attr) {
  if (!node.contains(attr)) {
    return Invalid(
        fmt::format("node '{}': missing attribute '{}' (its output size in bytes)", id, attr));
  }
  const Json& value = node.at(attr);
  // 2^63 is the first double past int64's range.
  constexpr double kLimit = 9223372036854775808.0;
  const bool whole =
      value.is_number_integer() || (value.is_number_float() && std::isfinite(value.get<double>()) &&
                                    std::floor(value.get<double>()) == value.get<double>());
  if (!whole || value.get<double>() < 0 || value.get<double>() >= kLimit) {
    return Invalid(fmt::format("node '{}': size '{}' must be a whole number of bytes >= 0, got {}",
                               id, attr, Quote(value)));
  }
  return value.is_number_unsigned()  ? static_cast<int64_t>(value.get<uint64_t>())
         : value.is_number_integer() ? value.get<int64_t>()
                                     : static_cast<int64_t>(value.get<double>());
}

// Kahn's algorithm; among the ready nodes the earliest phase, then the
// earliest in the file, goes first. Shorter than the graph when there is a
// cycle: the nodes left out are those on or after one.
std::vector<int> StableTopologicalOrder(const std::vector<FileNode>& nodes) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> pending(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> successors(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    for (int u : nodes[static_cast<size_t>(v)].predecessors) {
      successors[static_cast<size_t>(u)].push_back(v);
      ++pending[static_cast<size_t>(v)];
    }
  }
  auto key = [&](int v) {
    const std::optional<ir::Phase>& phase = nodes[static_cast<size_t>(v)].phase;
    return std::pair<int, int>(phase ? static_cast<int>(*phase) : 0, v);
  };
  auto later = [&](int a, int b) { return key(a) > key(b); };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  for (int v = 0; v < n; ++v) {
    if (pending[static_cast<size_t>(v)] == 0) ready.push(v);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : successors[static_cast<size_t>(v)]) {
      if (--pending[static_cast<size_t>(w)] == 0) ready.push(w);
    }
  }
  return order;
}

// A node on a cycle, for the message, given an order that stopped short of
// the whole graph: every node left out has a predecessor that is left out
// too, so n steps back along such predecessors end on a cycle.
std::string NodeOnCycle(const std::vector<FileNode>& nodes, const std::vector<int>& order) {
  std::vector<bool> ordered(nodes.size(), false);
  for (int v : order) ordered[static_cast<size_t>(v)] = true;
  int v = 0;
  while (ordered[static_cast<size_t>(v)]) ++v;
  for (size_t step = 0; step < nodes.size(); ++step) {
    for (int u : nodes[static_cast<size_t>(v)].predecessors) {
      if (!ordered[static_cast<size_t>(u)]) {
        v = u;
        break;
      }
    }
  }
  return nodes[static_cast<size_t>(v)].id;
}

// The step after which keeping every value needs the most bytes (the first
// such step): values live from their producer's step to their last reader's,
// outputs to the end.
int PeakStep(const std::vector<FileNode>& nodes, const std::vector<int>& order,
             const std::vector<bool>& is_output) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> step_of(static_cast<size_t>(n));
  for (int step = 0; step < n; ++step)
    step_of[static_cast<size_t>(order[static_cast<size_t>(step)])] = step;
  std::vector<int> last_step(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    last_step[static_cast<size_t>(v)] =
        is_output[static_cast<size_t>(v)] ? n - 1 : step_of[static_cast<size_t>(v)];
  }
  for (int v = 0; v < n; ++v) {
    for (int u : nodes[static_cast<size_t>(v)].predecessors) {
      last_step[static_cast<size_t>(u)] =
          std::max(last_step[static_cast<size_t>(u)], step_of[static_cast<size_t>(v)]);
    }
  }
  // live[s] = bytes of values with step_of <= s <= last_step, by a difference array.
  std::vector<int64_t> delta(static_cast<size_t>(n) + 1, 0);
  for (int v = 0; v < n; ++v) {
    delta[static_cast<size_t>(step_of[static_cast<size_t>(v)])] +=
        nodes[static_cast<size_t>(v)].bytes;
    delta[static_cast<size_t>(last_step[static_cast<size_t>(v)]) + 1] -=
        nodes[static_cast<size_t>(v)].bytes;
  }
  int peak = 0;
  int64_t live = 0;
  int64_t most = -1;
  for (int step = 0; step < n; ++step) {
    live += delta[static_cast<size_t>(step)];
    if (live > most) {
      most = live;
      peak = step;
    }
  }
  return peak;
}

}  // namespace

absl::StatusOr<CostedGraph> ParseNodeLinkGraph(std::string_view json_text,
                                               const NodeLinkOptions& options, std::string name) {
  ASSIGN_OR_RETURN(const Json root, ParseStrictJson(json_text));
  if (!root.is_object()) return Invalid("a node-link graph is a JSON object");
  const Json empty = Json::object();
  const Json& attrs = root.contains("graph") ? root.at("graph") : empty;
  if (!attrs.is_object()) return Invalid("'graph' (the graph attributes) must be an object");
  // A multigraph's repeated links are one read of one value; an undirected
  // graph does not say who reads whom.
  if (root.contains("directed") && !(root.at("directed").is_boolean() && root.at("directed"))) {
    return Invalid("the graph is not directed: links must say which node reads which");
  }
  ASSIGN_OR_RETURN(const std::string duration_attr,
                   GraphString(attrs, "duration_attr", options.duration_attr, "duration"));
  ASSIGN_OR_RETURN(const std::string size_attr,
                   GraphString(attrs, "size_attr", options.size_attr, "size"));
  ASSIGN_OR_RETURN(const std::string unit, GraphString(attrs, "time_unit", options.time_unit, "s"));
  ASSIGN_OR_RETURN(const double seconds_per_unit, SecondsPerUnit(unit));

  if (!root.contains("nodes") || !root.at("nodes").is_array()) {
    return Invalid("missing 'nodes', the list of nodes");
  }
  const Json& file_nodes = root.at("nodes");
  if (file_nodes.empty()) return Invalid("the graph has no nodes");
  std::vector<FileNode> nodes;
  absl::flat_hash_map<std::string, int> position;
  int with_phase = 0;
  for (const Json& file_node : file_nodes) {
    const std::string where = fmt::format("node {}", nodes.size());
    if (!file_node.is_object()) return Invalid(fmt::format("{}: must be an object", where));
    if (!file_node.contains("id")) return Invalid(fmt::format("{}: missing 'id'", where));
    FileNode node;
    ASSIGN_OR_RETURN(node.id, IdText(file_node.at("id"), where));
    if (!position.emplace(node.id, static_cast<int>(nodes.size())).second) {
      return Invalid(fmt::format("node '{}' appears twice", node.id));
    }
    ASSIGN_OR_RETURN(node.seconds,
                     ReadDuration(file_node, node.id, duration_attr, seconds_per_unit));
    ASSIGN_OR_RETURN(node.bytes, ReadSize(file_node, node.id, size_attr));
    if (file_node.contains("phase")) {
      const Json& phase = file_node.at("phase");
      node.phase = phase.is_string() ? ir::ParsePhase(phase.get<std::string>()) : std::nullopt;
      if (!node.phase) {
        return Invalid(
            fmt::format("node '{}': phase must be \"forward\", \"backward\" or \"update\", got {}",
                        node.id, Quote(phase)));
      }
      ++with_phase;
    }
    nodes.push_back(std::move(node));
  }
  if (with_phase != 0 && with_phase != static_cast<int>(nodes.size())) {
    for (const FileNode& node : nodes) {
      if (!node.phase) {
        return Invalid(
            fmt::format("node '{}' has no phase, but other nodes do: give every node "
                        "a phase or none",
                        node.id));
      }
    }
  }

  const char* links_key = root.contains("links") ? "links" : "edges";
  if (root.contains("links") && root.contains("edges")) {
    return Invalid("the graph has both 'links' and 'edges': give one");
  }
  if (!root.contains(links_key) || !root.at(links_key).is_array()) {
    return Invalid("missing 'links' (or 'edges'), the list of links");
  }
  int index = 0;
  for (const Json& link : root.at(links_key)) {
    const std::string where = fmt::format("link {}", index++);
    if (!link.is_object() || !link.contains("source") || !link.contains("target")) {
      return Invalid(fmt::format("{}: must be an object with 'source' and 'target'", where));
    }
    ASSIGN_OR_RETURN(const std::string source, IdText(link.at("source"), where));
    ASSIGN_OR_RETURN(const std::string target, IdText(link.at("target"), where));
    auto from = position.find(source);
    auto to = position.find(target);
    if (from == position.end()) {
      return Invalid(fmt::format("{}: source '{}' is not a node", where, source));
    }
    if (to == position.end()) {
      return Invalid(fmt::format("{}: target '{}' is not a node", where, target));
    }
    if (from->second == to->second) {
      return Invalid(fmt::format("{}: node '{}' reads itself (a cycle)", where, source));
    }
    std::vector<int>& predecessors = nodes[static_cast<size_t>(to->second)].predecessors;
    if (std::find(predecessors.begin(), predecessors.end(), from->second) == predecessors.end()) {
      predecessors.push_back(from->second);
    }
  }

  const int n = static_cast<int>(nodes.size());
  std::vector<int> order;
  if (attrs.contains("order")) {
    ASSIGN_OR_RETURN(order, IdList(attrs, "order", position));
    std::vector<int> step_of(static_cast<size_t>(n), -1);
    for (int step = 0; step < static_cast<int>(order.size()); ++step) {
      int& seen = step_of[static_cast<size_t>(order[static_cast<size_t>(step)])];
      if (seen >= 0) {
        return Invalid(
            fmt::format("graph attribute 'order' names '{}' twice",
                        nodes[static_cast<size_t>(order[static_cast<size_t>(step)])].id));
      }
      seen = step;
    }
    for (int v = 0; v < n; ++v) {
      if (step_of[static_cast<size_t>(v)] < 0) {
        return Invalid(fmt::format("graph attribute 'order' leaves out node '{}'",
                                   nodes[static_cast<size_t>(v)].id));
      }
      for (int u : nodes[static_cast<size_t>(v)].predecessors) {
        if (step_of[static_cast<size_t>(u)] > step_of[static_cast<size_t>(v)]) {
          return Invalid(
              fmt::format("graph attribute 'order' runs '{}' before '{}', which it reads",
                          nodes[static_cast<size_t>(v)].id, nodes[static_cast<size_t>(u)].id));
        }
      }
    }
  } else {
    order = StableTopologicalOrder(nodes);
    if (static_cast<int>(order.size()) != n) {
      return Invalid(
          fmt::format("the graph has a cycle through node '{}'", NodeOnCycle(nodes, order)));
    }
  }
  for (size_t step = 1; step < order.size(); ++step) {
    const FileNode& before = nodes[static_cast<size_t>(order[step - 1])];
    const FileNode& node = nodes[static_cast<size_t>(order[step])];
    if (before.phase && *node.phase < *before.phase) {
      return Invalid(fmt::format(
          "node '{}' ({}) runs after '{}' ({}): a training graph runs its phases in order, "
          "forward, backward, update",
          node.id, ir::PhaseName(*node.phase), before.id, ir::PhaseName(*before.phase)));
    }
  }

  std::vector<bool> is_output(static_cast<size_t>(n), false);
  if (attrs.contains("outputs")) {
    ASSIGN_OR_RETURN(const std::vector<int> outputs, IdList(attrs, "outputs", position));
    for (int v : outputs) is_output[static_cast<size_t>(v)] = true;
  } else {
    std::vector<bool> read(static_cast<size_t>(n), false);
    for (const FileNode& node : nodes) {
      for (int u : node.predecessors) read[static_cast<size_t>(u)] = true;
    }
    for (int v = 0; v < n; ++v) is_output[static_cast<size_t>(v)] = !read[static_cast<size_t>(v)];
  }

  CostedGraph costed;
  costed.graph = ir::Graph(std::move(name));
  costed.phases_given = with_phase > 0;
  const int cut_step = costed.phases_given ? -1 : PeakStep(nodes, order, is_output);
  std::vector<ir::ValueId> value_of(static_cast<size_t>(n), ir::kInvalidValue);
  for (int step = 0; step < n; ++step) {
    const int v = order[static_cast<size_t>(step)];
    const FileNode& node = nodes[static_cast<size_t>(v)];
    std::vector<ir::ValueId> inputs;
    for (int u : node.predecessors) inputs.push_back(value_of[static_cast<size_t>(u)]);
    const ir::Phase phase = costed.phases_given ? *node.phase
                            : step <= cut_step  ? ir::Phase::kForward
                                                : ir::Phase::kBackward;
    ASSIGN_OR_RETURN(const ir::NodeId id,
                     costed.graph.AddNode(ir::OpKind::kOpaque, std::move(inputs),
                                          {{"bytes", node.bytes}}, node.id, phase));
    if (costed.graph.node(id).name != node.id) {
      // The IR renamed it: its name was taken by another node's output.
      return Invalid(fmt::format("node '{}': its id clashes with another node's", node.id));
    }
    if (step == cut_step) costed.cut = id;
    value_of[static_cast<size_t>(v)] = costed.graph.node(id).outputs.front();
    costed.node_seconds.push_back(node.seconds);
  }
  for (int step = 0; step < n; ++step) {
    const int v = order[static_cast<size_t>(step)];
    if (is_output[static_cast<size_t>(v)]) costed.graph.AddOutput(value_of[static_cast<size_t>(v)]);
  }
  RETURN_IF_ERROR(ir::CheckGraphSize(costed.graph));
  return costed;
}

absl::StatusOr<CostedGraph> LoadNodeLinkGraph(const std::string& path,
                                              const NodeLinkOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path, kMaxFileBytes, "graph file"));
  absl::StatusOr<CostedGraph> graph = ParseNodeLinkGraph(text, options, path);
  if (!graph.ok()) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", path, StatusMessage(graph.status())));
  }
  return graph;
}

}  // namespace spillway::nodelink
