#include "program/program.h"

#include "fmt/format.h"
#include "support/units.h"

namespace spillway::program {

std::string_view StreamName(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return "compute";
    case Stream::kDeviceToHost:
      return "d2h";
    case Stream::kHostToDevice:
      return "h2d";
  }
  return "?";
}

std::string_view InstructionKindName(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::kAlloc:
      return "alloc";
    case InstructionKind::kFree:
      return "free";
    case InstructionKind::kCompute:
      return "compute";
    case InstructionKind::kRecompute:
      return "recompute";
    case InstructionKind::kCopyToHost:
      return "copy_to_host";
    case InstructionKind::kCopyToDevice:
      return "copy_to_device";
  }
  return "?";
}

std::string BufferName(const Program& program, const Buffer& buffer) {
  if (!buffer.given_name.empty() || program.graph == nullptr) return buffer.given_name;
  const std::string& value = program.graph->value(buffer.value).name;
  switch (buffer.role) {
    case BufferRole::kValue:
      return value;
    case BufferRole::kHost:
      return value + "@host";
    case BufferRole::kFetch:
      return value + "@fetch";
    case BufferRole::kRecompute:
      return value + "@recompute";
    case BufferRole::kScratch:
      return value + "@scratch";
  }
  return value;
}

std::string BufferName(const Program& program, BufferId id) {
  return BufferName(program, program.buffer(id));
}

namespace {

std::string BufferList(const Program& program, const BufferIds& ids) {
  std::string text;
  for (BufferId id : ids) {
    if (!text.empty()) text += ", ";
    text += id == kNoBuffer ? std::string("-") : BufferName(program, id);
  }
  return text;
}

}  // namespace

bool RecomputeReadsSavedStatistics(const ir::Node& node) {
  if (node.op != ir::OpKind::kBatchNorm) return false;
  absl::StatusOr<bool> training = node.attrs.GetBool("training", true);
  return training.ok() && *training;
}

ir::ValueId ReadValue(const ir::Graph& graph, const Instruction& instruction, size_t k) {
  const ir::Node& node = graph.node(instruction.node);
  if (k < node.inputs.size()) return node.inputs[k];
  return node.outputs[k - node.inputs.size() + 1];
}

std::string ProgramToText(const Program& program) {
  std::string text = fmt::format("program: {} buffers, {} instructions, {} events, arena {}",
                                 program.buffers.size(), program.instructions.size(),
                                 program.num_events, FormatBytes(program.arena_bytes));
  if (program.workspace_bytes > 0) {
    text += fmt::format(" (kernel workspace {} at {})", FormatBytes(program.workspace_bytes),
                        program.workspace_offset);
  }
  text += "\n";
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    std::string line = fmt::format("{:5} {:8} {:15}", i, StreamName(instruction.stream),
                                   InstructionKindName(instruction.kind));
    switch (instruction.kind) {
      case InstructionKind::kAlloc:
      case InstructionKind::kFree: {
        const Buffer& buffer = program.buffer(instruction.buffer);
        line += fmt::format(" {} ({} at {})", BufferName(program, buffer),
                            FormatBytes(buffer.bytes), buffer.offset);
        break;
      }
      case InstructionKind::kCompute:
      case InstructionKind::kRecompute:
        line += fmt::format(
            " {} ({}) reads [{}] writes [{}]", program.graph->node(instruction.node).name,
            ir::OpName(program.graph->node(instruction.node).op),
            BufferList(program, instruction.reads), BufferList(program, instruction.writes));
        if (instruction.scratch != kNoBuffer) {
          line += fmt::format(" scratch {}", BufferName(program, instruction.scratch));
        }
        break;
      case InstructionKind::kCopyToHost:
      case InstructionKind::kCopyToDevice:
        line += fmt::format(" {} -> {}", BufferList(program, instruction.reads),
                            BufferList(program, instruction.writes));
        break;
    }
    for (EventId event : instruction.waits) line += fmt::format(" wait e{}", event);
    if (instruction.record != kNoEvent) line += fmt::format(" record e{}", instruction.record);
    text += line + "\n";
  }
  return text;
}

}  // namespace spillway::program
