#include "program/verifier.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

using Clock = std::array<int, kNumStreams>;

Clock Join(const Clock& a, const Clock& b) {
  Clock joined;
  for (int s = 0; s < kNumStreams; ++s)
    joined[static_cast<size_t>(s)] = std::max(a[static_cast<size_t>(s)], b[static_cast<size_t>(s)]);
  return joined;
}

bool AtLeast(const Clock& a, const Clock& b) {
  for (int s = 0; s < kNumStreams; ++s) {
    if (a[static_cast<size_t>(s)] < b[static_cast<size_t>(s)]) return false;
  }
  return true;
}

size_t Index(Stream stream) { return static_cast<size_t>(stream); }

class Verifier {
 public:
  explicit Verifier(const Program& program) : program_(program) {}

  absl::Status Run() {
    if (program_.graph == nullptr) return Error("the program has no graph");
    if (absl::Status status = CheckStructure(); !status.ok()) return status;
    if (absl::Status status = ComputeClocks(); !status.ok()) return status;
    if (absl::Status status = CheckLifetimes(); !status.ok()) return status;
    if (absl::Status status = CheckAccesses(); !status.ok()) return status;
    if (absl::Status status = CheckOverlaps(); !status.ok()) return status;
    if (absl::Status status = CheckCommitPoint(); !status.ok()) return status;
    return CheckOutputsSurvive();
  }

 private:
  static absl::Status Error(std::string message) {
    return absl::FailedPreconditionError(fmt::format("invalid program: {}", message));
  }

  std::string Describe(size_t i) const {
    const Instruction& instruction = program_.instructions[i];
    std::string what =
        fmt::format("instruction {} ({} on {}", i, InstructionKindName(instruction.kind),
                    StreamName(instruction.stream));
    if (instruction.node != ir::kNoNode && instruction.node < program_.graph->num_nodes()) {
      what += fmt::format(", node '{}'", program_.graph->node(instruction.node).name);
    }
    return what + ")";
  }

  std::string Name(BufferId buffer) const {
    return fmt::format("buffer '{}'", BufferName(program_, buffer));
  }

  bool ValidBuffer(BufferId buffer) const {
    return buffer >= 0 && buffer < static_cast<BufferId>(program_.buffers.size());
  }

  absl::Status CheckStructure() {
    const std::vector<Instruction>& instructions = program_.instructions;
    std::vector<int> computed(static_cast<size_t>(program_.graph->num_nodes()), 0);
    std::vector<int> scratch_users(program_.buffers.size(), 0);
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      if (instruction.scratch != kNoBuffer && instruction.kind != InstructionKind::kCompute &&
          instruction.kind != InstructionKind::kRecompute) {
        return Error(Describe(i) + " has a scratch buffer but runs no kernel");
      }
      for (const BufferIds* list : {&instruction.reads, &instruction.writes}) {
        for (BufferId buffer : *list) {
          if (ValidBuffer(buffer) && program_.buffer(buffer).role == BufferRole::kScratch) {
            return Error(fmt::format("{} reads or writes {}, which is a kernel's scratch",
                                     Describe(i), Name(buffer)));
          }
        }
      }
      switch (instruction.kind) {
        case InstructionKind::kAlloc:
        case InstructionKind::kFree:
          if (!ValidBuffer(instruction.buffer)) return Error(Describe(i) + " has no valid buffer");
          if (program_.buffer(instruction.buffer).memory != Memory::kDevice) {
            return Error(fmt::format("{} allocates or frees host {}", Describe(i),
                                     Name(instruction.buffer)));
          }
          break;
        case InstructionKind::kCompute:
        case InstructionKind::kRecompute: {
          if (instruction.stream != Stream::kCompute) {
            return Error(Describe(i) + " runs a kernel off the compute stream");
          }
          if (instruction.node < 0 || instruction.node >= program_.graph->num_nodes()) {
            return Error(Describe(i) + " names no node of the graph");
          }
          const ir::Node& node = program_.graph->node(instruction.node);
          if (instruction.kind == InstructionKind::kCompute) {
            ++computed[static_cast<size_t>(node.id)];
            if (instruction.reads.size() != node.inputs.size()) {
              return Error(Describe(i) + " does not read one buffer per input");
            }
          } else if (node.phase != ir::Phase::kForward) {
            return Error(Describe(i) + " recomputes a node that is not a forward node");
          }
          if (instruction.writes.size() != node.outputs.size()) {
            return Error(Describe(i) + " does not write one buffer per output");
          }
          if (instruction.scratch != kNoBuffer) {
            RETURN_IF_ERROR(CheckScratch(i, instruction));
            ++scratch_users[static_cast<size_t>(instruction.scratch)];
          }
          for (BufferId buffer : instruction.reads) {
            // A recompute skips the inputs it does not need (running statistics).
            if (buffer == kNoBuffer && instruction.kind == InstructionKind::kRecompute) continue;
            if (!ValidBuffer(buffer)) return Error(Describe(i) + " reads no valid buffer");
          }
          for (size_t o = 0; o < instruction.writes.size(); ++o) {
            const BufferId buffer = instruction.writes[o];
            if (buffer == kNoBuffer && instruction.kind == InstructionKind::kRecompute && o > 0)
              continue;
            if (!ValidBuffer(buffer)) return Error(Describe(i) + " writes no valid buffer");
            if (program_.buffer(buffer).bytes <
                program_.graph->value(node.outputs[o]).type.bytes()) {
              return Error(fmt::format("{} writes output {} into {}, which is too small",
                                       Describe(i), o, Name(buffer)));
            }
          }
          break;
        }
        case InstructionKind::kCopyToHost:
        case InstructionKind::kCopyToDevice: {
          const bool to_host = instruction.kind == InstructionKind::kCopyToHost;
          if (instruction.stream != (to_host ? Stream::kDeviceToHost : Stream::kHostToDevice)) {
            return Error(Describe(i) + " is on the wrong copy stream");
          }
          if (instruction.reads.size() != 1 || instruction.writes.size() != 1 ||
              !ValidBuffer(instruction.reads[0]) || !ValidBuffer(instruction.writes[0])) {
            return Error(Describe(i) + " must copy one buffer into one buffer");
          }
          const Buffer& from = program_.buffer(instruction.reads[0]);
          const Buffer& to = program_.buffer(instruction.writes[0]);
          if (from.memory != (to_host ? Memory::kDevice : Memory::kHost) ||
              to.memory != (to_host ? Memory::kHost : Memory::kDevice)) {
            return Error(Describe(i) + " copies between the wrong memories");
          }
          if (from.bytes != to.bytes) {
            return Error(
                fmt::format("{} copies {} bytes into {} bytes", Describe(i), from.bytes, to.bytes));
          }
          break;
        }
      }
    }
    for (const Buffer& buffer : program_.buffers) {
      const int users = scratch_users[static_cast<size_t>(buffer.id)];
      if (buffer.role == BufferRole::kScratch && users != 1) {
        return Error(
            fmt::format("{} is the scratch of {} kernels, not one", Name(buffer.id), users));
      }
    }
    for (const ir::Node& node : program_.graph->nodes()) {
      if (computed[static_cast<size_t>(node.id)] != 1) {
        return Error(fmt::format("node '{}' is computed {} times, not once", node.name,
                                 computed[static_cast<size_t>(node.id)]));
      }
    }
    if (program_.alignment < 1) {
      return Error(fmt::format("the alignment is {} bytes", program_.alignment));
    }
    for (const Buffer& buffer : program_.buffers) {
      if (buffer.memory != Memory::kDevice) continue;
      if (buffer.offset < 0 || buffer.bytes < 0 ||
          buffer.offset > program_.arena_bytes - buffer.bytes) {
        return Error(fmt::format("{} at offset {} ({} bytes) lies outside the {}-byte arena",
                                 Name(buffer.id), buffer.offset, buffer.bytes,
                                 program_.arena_bytes));
      }
      if (buffer.offset % program_.alignment != 0) {
        return Error(fmt::format("{} is at offset {}, not a multiple of the {}-byte alignment",
                                 Name(buffer.id), buffer.offset, program_.alignment));
      }
      // Every kernel may write all of the workspace region, so no buffer may
      // share a byte with it.
      if (program_.workspace_bytes > 0 &&
          buffer.offset + buffer.bytes > program_.workspace_offset) {
        return Error(
            fmt::format("{} ({} bytes at offset {}) reaches into the kernels' workspace "
                        "at offset {}",
                        Name(buffer.id), buffer.bytes, buffer.offset, program_.workspace_offset));
      }
    }
    if (program_.workspace_bytes < 0 ||
        (program_.workspace_bytes > 0 &&
         (program_.workspace_offset < 0 || program_.workspace_offset % program_.alignment != 0 ||
          program_.workspace_offset > program_.arena_bytes - program_.workspace_bytes))) {
      return Error(fmt::format(
          "the kernels' workspace ({} bytes at offset {}) is not an aligned region of the "
          "{}-byte arena",
          program_.workspace_bytes, program_.workspace_offset, program_.arena_bytes));
    }
    return absl::OkStatus();
  }

  // The commit point is the first update: no copy may come after it in
  // program order, so a failed copy can never leave parameters half-updated
  // (the runtime puts the step's earlier writes back when a copy fails).
  absl::Status CheckCommitPoint() const {
    const std::vector<Instruction>& instructions = program_.instructions;
    size_t commit = instructions.size();
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      if (instruction.kind == InstructionKind::kCompute &&
          program_.graph->node(instruction.node).phase == ir::Phase::kUpdate) {
        commit = std::min(commit, i);
      }
      const bool copy = instruction.kind == InstructionKind::kCopyToHost ||
                        instruction.kind == InstructionKind::kCopyToDevice;
      if (copy && i > commit) {
        return Error(
            fmt::format("{} runs after the first update, {}: a failed copy could leave "
                        "parameters half-updated",
                        Describe(i), Describe(commit)));
      }
    }
    return absl::OkStatus();
  }

  // A graph output is read, after the step, from the buffer its producer
  // wrote: nothing may free or overwrite that buffer later in program order.
  // One pass: each producer's write marks its buffer as holding an output,
  // and every later write or free is checked against the marks.
  absl::Status CheckOutputsSurvive() const {
    const ir::Graph& graph = *program_.graph;
    std::vector<std::vector<ir::ValueId>> outputs_of(static_cast<size_t>(graph.num_nodes()));
    for (ir::ValueId output : graph.outputs()) {
      const ir::NodeId producer = graph.value(output).producer;
      if (producer == ir::kNoNode) continue;  // a graph input: persistent
      outputs_of[static_cast<size_t>(producer)].push_back(output);
    }
    std::vector<ir::ValueId> holds(program_.buffers.size(), ir::kInvalidValue);
    const std::vector<Instruction>& instructions = program_.instructions;
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      auto check = [&](BufferId buffer, bool freed) -> absl::Status {
        if (buffer == kNoBuffer || holds[static_cast<size_t>(buffer)] == ir::kInvalidValue) {
          return absl::OkStatus();
        }
        return Error(fmt::format("graph output '{}' does not survive the step: {} {} its buffer",
                                 graph.value(holds[static_cast<size_t>(buffer)]).name, Describe(i),
                                 freed ? "frees" : "overwrites"));
      };
      if (instruction.kind == InstructionKind::kFree) {
        RETURN_IF_ERROR(check(instruction.buffer, true));
      }
      // Checked before this instruction's own outputs are marked: its write
      // is what the mark records.
      for (BufferId buffer : instruction.writes) RETURN_IF_ERROR(check(buffer, false));
      if (instruction.kind != InstructionKind::kCompute) continue;
      for (ir::ValueId output : outputs_of[static_cast<size_t>(instruction.node)]) {
        const BufferId holder =
            instruction.writes[static_cast<size_t>(graph.value(output).output_index)];
        if (holder == kNoBuffer) {
          return Error(fmt::format("graph output '{}' is not written by {}",
                                   graph.value(output).name, Describe(i)));
        }
        holds[static_cast<size_t>(holder)] = output;
      }
    }
    return absl::OkStatus();
  }

  // Vector clocks: after[i][s] counts the instructions of stream s that have
  // finished once instruction i has. A free's clock is the point at which it
  // takes effect; it advances no stream.
  absl::Status ComputeClocks() {
    const std::vector<Instruction>& instructions = program_.instructions;
    const size_t n = instructions.size();
    start_.assign(n, Clock{});
    after_.assign(n, Clock{});
    position_.assign(n, -1);
    std::vector<int> recorder(static_cast<size_t>(program_.num_events), -1);
    std::array<Clock, kNumStreams> stream_clock{};
    std::array<int, kNumStreams> stream_count{};
    for (size_t i = 0; i < n; ++i) {
      const Instruction& instruction = instructions[i];
      const size_t s = Index(instruction.stream);
      Clock clock = stream_clock[s];
      for (EventId event : instruction.waits) {
        if (event < 0 || event >= program_.num_events) {
          return Error(
              fmt::format("{} waits on event {}, which does not exist", Describe(i), event));
        }
        const int by = recorder[static_cast<size_t>(event)];
        if (by < 0) {
          return Error(fmt::format(
              "{} waits on event {} before any instruction records it: the order has a cycle "
              "or the event is never recorded",
              Describe(i), event));
        }
        clock = Join(clock, after_[static_cast<size_t>(by)]);
      }
      start_[i] = clock;
      if (instruction.kind != InstructionKind::kFree) {
        position_[i] = stream_count[s]++;
        clock[s] = position_[i] + 1;
        stream_clock[s] = clock;
      }
      after_[i] = clock;
      if (instruction.record != kNoEvent) {
        if (instruction.record < 0 || instruction.record >= program_.num_events) {
          return Error(fmt::format("{} records event {}, which does not exist", Describe(i),
                                   instruction.record));
        }
        if (recorder[static_cast<size_t>(instruction.record)] >= 0) {
          return Error(fmt::format("event {} is recorded twice (instructions {} and {})",
                                   instruction.record,
                                   recorder[static_cast<size_t>(instruction.record)], i));
        }
        recorder[static_cast<size_t>(instruction.record)] = static_cast<int>(i);
      }
    }
    return absl::OkStatus();
  }

  // Whether instruction `a` (not a free) has finished before `b` starts.
  bool HappensBefore(size_t a, size_t b) const {
    const Instruction& first = program_.instructions[a];
    return start_[b][Index(first.stream)] >= position_[a] + 1;
  }

  absl::Status CheckLifetimes() {
    const std::vector<Instruction>& instructions = program_.instructions;
    alloc_.assign(program_.buffers.size(), -1);
    free_.assign(program_.buffers.size(), -1);
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      if (instruction.kind != InstructionKind::kAlloc &&
          instruction.kind != InstructionKind::kFree) {
        continue;
      }
      const size_t b = static_cast<size_t>(instruction.buffer);
      std::vector<int>& seen = instruction.kind == InstructionKind::kAlloc ? alloc_ : free_;
      if (seen[b] >= 0) {
        return Error(fmt::format(
            "{} is {} twice (instructions {} and {})", Name(instruction.buffer),
            instruction.kind == InstructionKind::kAlloc ? "allocated" : "freed", seen[b], i));
      }
      seen[b] = static_cast<int>(i);
    }
    std::vector<bool> is_output(static_cast<size_t>(program_.graph->num_values()), false);
    for (ir::ValueId output : program_.graph->outputs())
      is_output[static_cast<size_t>(output)] = true;
    // A buffer that ends the step holding a graph output may stay.
    std::vector<ir::ValueId> last_held(program_.buffers.size(), ir::kInvalidValue);
    for (const Instruction& instruction : instructions) {
      if (instruction.kind == InstructionKind::kAlloc ||
          instruction.kind == InstructionKind::kFree) {
        continue;
      }
      for (size_t o = 0; o < instruction.writes.size(); ++o) {
        if (instruction.writes[o] == kNoBuffer) continue;
        last_held[static_cast<size_t>(instruction.writes[o])] = Written(instruction, o);
      }
    }
    for (const Buffer& buffer : program_.buffers) {
      if (buffer.memory != Memory::kDevice) continue;
      const size_t b = static_cast<size_t>(buffer.id);
      if (alloc_[b] < 0) return Error(fmt::format("{} is never allocated", Name(buffer.id)));
      if (buffer.persistent && free_[b] >= 0) {
        return Error(fmt::format("persistent {} is freed", Name(buffer.id)));
      }
      if (!buffer.persistent && free_[b] < 0 &&
          !(last_held[b] >= 0 && is_output[static_cast<size_t>(last_held[b])])) {
        return Error(fmt::format("{} is never freed", Name(buffer.id)));
      }
      if (free_[b] >= 0 && free_[b] < alloc_[b]) {
        return Error(fmt::format("{} is freed before it is allocated", Name(buffer.id)));
      }
    }
    return absl::OkStatus();
  }

  // The value an instruction expects in each buffer it reads (ReadValue for
  // kernels, the spilled value for copies).
  ir::ValueId ExpectedRead(const Instruction& instruction, size_t k) const {
    if (instruction.kind == InstructionKind::kCopyToHost ||
        instruction.kind == InstructionKind::kCopyToDevice) {
      return program_.buffer(instruction.writes[0]).value;
    }
    return ReadValue(*program_.graph, instruction, k);
  }

  ir::ValueId Written(const Instruction& instruction, size_t o) const {
    if (instruction.kind == InstructionKind::kCopyToHost ||
        instruction.kind == InstructionKind::kCopyToDevice) {
      return program_.buffer(instruction.writes[0]).value;
    }
    return program_.graph->node(instruction.node).outputs[o];
  }

  std::string ValueName(ir::ValueId value) const {
    return value == ir::kInvalidValue ? std::string("nothing")
                                      : fmt::format("'{}'", program_.graph->value(value).name);
  }

  // Follows, in program order, which value each buffer holds. Every read must
  // find the value it expects, written by an instruction that has finished;
  // every write must come after the reads and writes of what it replaces.
  absl::Status CheckAccesses() {
    const std::vector<Instruction>& instructions = program_.instructions;
    std::vector<ir::ValueId> holder(program_.buffers.size(), ir::kInvalidValue);
    std::vector<int> writer(program_.buffers.size(), -1);
    std::vector<std::vector<size_t>> readers(program_.buffers.size());
    for (const Buffer& buffer : program_.buffers) {
      if (buffer.persistent) holder[static_cast<size_t>(buffer.id)] = buffer.value;
    }
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      if (instruction.kind == InstructionKind::kAlloc ||
          instruction.kind == InstructionKind::kFree) {
        continue;
      }
      for (size_t k = 0; k < instruction.reads.size(); ++k) {
        const BufferId buffer = instruction.reads[k];
        if (buffer == kNoBuffer) continue;
        const size_t b = static_cast<size_t>(buffer);
        if (program_.buffer(buffer).memory == Memory::kDevice) {
          if (absl::Status status = CheckResident(i, buffer, "reads"); !status.ok()) return status;
        }
        const ir::ValueId expected = ExpectedRead(instruction, k);
        if (holder[b] != expected) {
          return Error(fmt::format("{} reads {} for {}, but it holds {}", Describe(i), Name(buffer),
                                   ValueName(expected), ValueName(holder[b])));
        }
        if (writer[b] >= 0 && !HappensBefore(static_cast<size_t>(writer[b]), i)) {
          return Error(
              fmt::format("{} reads {} before any write of it has completed (missing wait "
                          "for a fetch or a recomputation?)",
                          Describe(i), Name(buffer)));
        }
        readers[b].push_back(i);
      }
      if (instruction.scratch != kNoBuffer) {
        RETURN_IF_ERROR(CheckResident(i, instruction.scratch, "uses as scratch"));
      }
      for (size_t o = 0; o < instruction.writes.size(); ++o) {
        const BufferId buffer = instruction.writes[o];
        if (buffer == kNoBuffer) continue;
        const size_t b = static_cast<size_t>(buffer);
        if (program_.buffer(buffer).memory == Memory::kDevice) {
          if (absl::Status status = CheckResident(i, buffer, "writes"); !status.ok()) return status;
        }
        for (size_t reader : readers[b]) {
          if (reader != i && !HappensBefore(reader, i)) {
            return Error(fmt::format("{} overwrites {} while instruction {} may still read it",
                                     Describe(i), Name(buffer), reader));
          }
        }
        if (writer[b] >= 0 && !HappensBefore(static_cast<size_t>(writer[b]), i)) {
          return Error(fmt::format("{} writes {} while instruction {} may still write it",
                                   Describe(i), Name(buffer), writer[b]));
        }
        readers[b].clear();
        writer[b] = static_cast<int>(i);
        holder[b] = Written(instruction, o);
      }
    }
    return absl::OkStatus();
  }

  // A kernel's scratch is a device buffer of its own, which nothing keeps.
  absl::Status CheckScratch(size_t i, const Instruction& instruction) const {
    const BufferId scratch = instruction.scratch;
    if (!ValidBuffer(scratch)) return Error(Describe(i) + " has no valid scratch buffer");
    const Buffer& buffer = program_.buffer(scratch);
    if (buffer.role != BufferRole::kScratch || buffer.memory != Memory::kDevice ||
        buffer.persistent) {
      return Error(fmt::format("{} takes {} as scratch, which is not a scratch device buffer",
                               Describe(i), Name(scratch)));
    }
    return absl::OkStatus();
  }

  absl::Status CheckResident(size_t i, BufferId buffer, std::string_view verb) const {
    const size_t b = static_cast<size_t>(buffer);
    const int alloc = alloc_[b];
    if (alloc < 0 || !HappensBefore(static_cast<size_t>(alloc), i)) {
      return Error(fmt::format("{} {} {} before it is allocated", Describe(i), verb, Name(buffer)));
    }
    const int free = free_[b];
    if (free >= 0) {
      const Instruction& instruction = program_.instructions[i];
      const bool before_free =
          after_[static_cast<size_t>(free)][Index(instruction.stream)] >= position_[i] + 1;
      if (!before_free) {
        return Error(fmt::format("{} {} {} after it may have been freed (instruction {})",
                                 Describe(i), verb, Name(buffer), free));
      }
    }
    return absl::OkStatus();
  }

  // Whether buffer a is certainly released before buffer b is allocated.
  bool ReleasedBefore(const Buffer& a, const Buffer& b) const {
    const int free = free_[static_cast<size_t>(a.id)];
    if (free < 0) return false;
    return AtLeast(start_[static_cast<size_t>(alloc_[static_cast<size_t>(b.id)])],
                   after_[static_cast<size_t>(free)]);
  }

  absl::Status CheckOverlaps() const {
    std::vector<const Buffer*> device;
    for (const Buffer& buffer : program_.buffers) {
      if (buffer.memory == Memory::kDevice && buffer.bytes > 0) device.push_back(&buffer);
    }
    std::sort(device.begin(), device.end(),
              [](const Buffer* a, const Buffer* b) { return a->offset < b->offset; });
    for (size_t i = 0; i < device.size(); ++i) {
      const Buffer& a = *device[i];
      for (size_t j = i + 1; j < device.size() && device[j]->offset < a.offset + a.bytes; ++j) {
        const Buffer& b = *device[j];
        if (ReleasedBefore(a, b) || ReleasedBefore(b, a)) continue;
        return Error(fmt::format(
            "{} [{}, {}) and {} [{}, {}) share arena bytes while both may be live", Name(a.id),
            a.offset, a.offset + a.bytes, Name(b.id), b.offset, b.offset + b.bytes));
      }
    }
    return absl::OkStatus();
  }

  const Program& program_;
  std::vector<Clock> start_;
  std::vector<Clock> after_;
  std::vector<int> position_;  // index within its stream; -1 for frees
  std::vector<int> alloc_;
  std::vector<int> free_;
};

}  // namespace

absl::Status VerifyProgram(const Program& program) { return Verifier(program).Run(); }

}  // namespace spillway::program
