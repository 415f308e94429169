#include "sim/chrome_trace.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "support/check.h"

namespace spillway::sim {
namespace {

using Json = nlohmann::json;

// Longer than program::StreamName: the track names are read by people who
// have not seen the code.
std::string_view TrackName(program::Stream stream) {
  switch (stream) {
    case program::Stream::kCompute:
      return "compute";
    case program::Stream::kDeviceToHost:
      return "d2h (device to host)";
    case program::Stream::kHostToDevice:
      return "h2d (host to device)";
  }
  return "unknown";
}

// tid 0 is left to the process-wide counter; some viewers treat it specially.
int Tid(program::Stream stream) { return static_cast<int>(stream) + 1; }

// Whole nanoseconds, far finer than any cost model, expressed in the format's
// microseconds: dividing an integral count keeps the printed numbers short
// ("7.5", not "7.500000000000001"), which matters in traces of 100k events.
double Nanos(double seconds) { return std::round(seconds * 1e9); }
double Micros(double seconds) { return Nanos(seconds) / 1e3; }
double DurationMicros(const InstructionTiming& timing) {
  return (Nanos(timing.end_s) - Nanos(timing.start_s)) / 1e3;
}

std::string NodeName(const program::Program& program, ir::NodeId node) {
  if (program.graph == nullptr || node < 0 || node >= program.graph->num_nodes()) {
    return fmt::format("node {}", node);
  }
  return program.graph->node(node).name;
}

std::string TraceBufferName(const program::Program& program, program::BufferId id) {
  if (id < 0 || static_cast<size_t>(id) >= program.buffers.size()) {
    return fmt::format("buffer {}", id);
  }
  return program::BufferName(program, id);
}

int64_t BufferBytes(const program::Program& program, program::BufferId id) {
  if (id < 0 || static_cast<size_t>(id) >= program.buffers.size()) return 0;
  return program.buffer(id).bytes;
}

Json Metadata(int pid, std::string_view name, int tid, Json args) {
  return Json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

Json InstructionEvent(int pid, const program::Program& program,
                      const program::Instruction& instruction, const InstructionTiming& timing) {
  using program::InstructionKind;
  Json event{{"cat", program::InstructionKindName(instruction.kind)},
             {"pid", pid},
             {"tid", Tid(instruction.stream)},
             {"ts", Micros(timing.start_s)}};
  Json args{{"step", instruction.step}};
  switch (instruction.kind) {
    case InstructionKind::kAlloc:
    case InstructionKind::kFree:
      event["name"] = fmt::format("{} {}", program::InstructionKindName(instruction.kind),
                                  TraceBufferName(program, instruction.buffer));
      event["ph"] = "i";
      event["s"] = "t";
      args["bytes"] = BufferBytes(program, instruction.buffer);
      break;
    case InstructionKind::kCompute:
    case InstructionKind::kRecompute: {
      const bool recompute = instruction.kind == InstructionKind::kRecompute;
      event["name"] =
          fmt::format("{}{}", recompute ? "recompute " : "", NodeName(program, instruction.node));
      event["ph"] = "X";
      event["dur"] = DurationMicros(timing);
      int64_t written = 0;
      for (program::BufferId id : instruction.writes) written += BufferBytes(program, id);
      args["bytes"] = written;
      if (program.graph != nullptr && instruction.node >= 0 &&
          instruction.node < program.graph->num_nodes()) {
        args["op"] = ir::OpName(program.graph->node(instruction.node).op);
      }
      break;
    }
    case InstructionKind::kCopyToHost:
    case InstructionKind::kCopyToDevice: {
      const program::BufferId from =
          instruction.reads.empty() ? program::kNoBuffer : instruction.reads[0];
      const program::BufferId to =
          instruction.writes.empty() ? program::kNoBuffer : instruction.writes[0];
      // The destination's name says where the bytes went ("conv1@host",
      // "conv1@fetch"), which the source's name does not for a fetch.
      event["name"] = TraceBufferName(program, to);
      event["ph"] = "X";
      event["dur"] = DurationMicros(timing);
      args["bytes"] = BufferBytes(program, from);
      args["from"] = TraceBufferName(program, from);
      args["to"] = TraceBufferName(program, to);
      break;
    }
  }
  event["args"] = std::move(args);
  return event;
}

void Append(std::string& out, const Json& event, bool& first) {
  out += first ? "\n" : ",\n";
  first = false;
  // Names come from model files; a stray invalid UTF-8 byte must not make the
  // whole export throw.
  out += event.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A timeline's figures, for "otherData".
Json Figures(const SimulationResult& result) {
  return Json{{"step_time_ms", Nanos(result.step_time_s) / 1e6},
              {"peak_bytes", result.peak_bytes},
              {"peak_time_ms", Nanos(result.peak_time_s) / 1e6},
              {"d2h_bytes", result.d2h_bytes},
              {"h2d_bytes", result.h2d_bytes}};
}

}  // namespace

std::string ChromeTraceJson(const program::Program& program, const SimulationResult& result,
                            std::string_view title) {
  const TraceProcess process{title, &result};
  return ChromeTraceJson(program, std::span<const TraceProcess>(&process, 1));
}

std::string ChromeTraceJson(const program::Program& program,
                            std::span<const TraceProcess> processes) {
  SPILLWAY_CHECK(!processes.empty(), "a trace shows at least one timeline");
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  for (size_t p = 0; p < processes.size(); ++p) {
    const SimulationResult& result = *processes[p].result;
    SPILLWAY_CHECK(result.timings.size() == program.instructions.size(),
                   "each timeline must be of this program (one timing per instruction)");
    const int pid = static_cast<int>(p) + 1;
    Append(out, Metadata(pid, "process_name", 0, {{"name", processes[p].title}}), first);
    Append(out, Metadata(pid, "process_sort_index", 0, {{"sort_index", p}}), first);
    for (int s = 0; s < program::kNumStreams; ++s) {
      const auto stream = static_cast<program::Stream>(s);
      Append(out, Metadata(pid, "thread_name", Tid(stream), {{"name", TrackName(stream)}}), first);
      Append(out, Metadata(pid, "thread_sort_index", Tid(stream), {{"sort_index", s}}), first);
    }

    for (size_t i = 0; i < program.instructions.size(); ++i) {
      Append(out, InstructionEvent(pid, program, program.instructions[i], result.timings[i]),
             first);
    }

    // Every point, including several at one instant: collapsing them would
    // hide a momentary peak, and the peak is what the plot is for.
    for (const MemoryPoint& point : result.memory) {
      Append(out,
             Json{{"name", "device memory"},
                  {"ph", "C"},
                  {"pid", pid},
                  {"tid", 0},
                  {"ts", Micros(point.time_s)},
                  {"args", {{"allocated", point.bytes}}}},
             first);
    }
  }

  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  Json other = Figures(*processes.front().result);
  other["arena_bytes"] = program.arena_bytes;
  if (processes.size() > 1) {
    Json all = Json::array();
    for (const TraceProcess& process : processes) {
      Json figures = Figures(*process.result);
      figures["title"] = process.title;
      all.push_back(std::move(figures));
    }
    other["processes"] = std::move(all);
  }
  out += other.dump();
  out += "\n}\n";
  return out;
}

}  // namespace spillway::sim
