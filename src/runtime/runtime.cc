#include "runtime/runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "fmt/format.h"
#include "program/verifier.h"
#include "support/check.h"
#include "support/checked_math.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::runtime {
namespace {

using backends::Backend;
using backends::TensorRef;
using program::Buffer;
using program::BufferId;
using program::BufferName;
using program::EventId;
using program::Instruction;
using program::InstructionKind;
using program::kNoBuffer;
using program::kNoEvent;
using program::Memory;
using program::Program;
using program::Stream;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

size_t StreamIndex(Stream stream) { return static_cast<size_t>(stream); }

// "compute 'conv1' (conv2d) at step 4", "copy_to_host 'conv1' -> 'conv1@host' at step 4".
std::string Describe(const Program& program, size_t index) {
  const Instruction& instruction = program.instructions[index];
  std::string subject;
  switch (instruction.kind) {
    case InstructionKind::kAlloc:
    case InstructionKind::kFree:
      subject = fmt::format("'{}'", BufferName(program, instruction.buffer));
      break;
    case InstructionKind::kCompute:
    case InstructionKind::kRecompute: {
      const ir::Node& node = program.graph->node(instruction.node);
      subject = fmt::format("'{}' ({})", node.name, ir::OpName(node.op));
      break;
    }
    case InstructionKind::kCopyToHost:
    case InstructionKind::kCopyToDevice:
      subject = fmt::format("'{}' -> '{}'", BufferName(program, instruction.reads[0]),
                            BufferName(program, instruction.writes[0]));
      break;
  }
  return fmt::format("{} {} at step {}", program::InstructionKindName(instruction.kind), subject,
                     instruction.step);
}

// Host memory for spilled tensors. Blocks come from Backend::AllocateHost
// (pinned memory on CUDA, which is slow to allocate), are kept when released
// and handed out again for the same size, in this step or a later one.
class HostPool {
 public:
  explicit HostPool(Backend& backend) : backend_(backend) {}
  ~HostPool() {
    for (void* block : blocks_) backend_.FreeHost(block);
  }
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  absl::StatusOr<void*> Acquire(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* block = nullptr;
    std::vector<void*>& unused = unused_[bytes];
    if (!unused.empty()) {
      block = unused.back();
      unused.pop_back();
    } else {
      ASSIGN_OR_RETURN(block, backend_.AllocateHost(bytes));
      blocks_.push_back(block);
    }
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return block;
  }

  void Release(void* block, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    unused_[bytes].push_back(block);
    in_use_ -= bytes;
  }

  // The most bytes in use at once since the last call.
  int64_t TakePeak() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t peak = peak_;
    peak_ = in_use_;
    return peak;
  }

 private:
  Backend& backend_;
  std::mutex mutex_;
  std::vector<void*> blocks_;                     // every block, to free at the end
  std::map<int64_t, std::vector<void*>> unused_;  // by size
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
};

}  // namespace

class Runtime::Impl {
 public:
  Impl(const Program& program, Backend& backend) : program_(program), backend_(backend) {}
  ~Impl() {
    if (arena_ != nullptr) backend_.FreeDevice(arena_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  absl::Status Check(int64_t budget_bytes);
  absl::Status Prepare();
  absl::StatusOr<StepResult> RunStep(const StepOptions& options);
  absl::Status Write(ir::ValueId value, std::span<const std::byte> bytes);
  absl::Status Read(ir::ValueId value, std::span<std::byte> bytes) const;

 private:
  struct StreamStats {
    double compute_seconds = 0;
    double recompute_seconds = 0;
    int64_t bytes_to_host = 0;
    int64_t bytes_to_device = 0;
    std::vector<double> node_seconds;  // compute stream, with StepOptions::time_nodes
  };

  // What one step shares between its streams. Everything but the per-stream
  // stats, the captures (compute only) and the host addresses (each written
  // by one stream and read by another after an event) is guarded by `mutex`.
  struct Step {
    Step(const StepOptions& step_options, const Program& program)
        : options(step_options),
          capture(step_options.capture.begin(), step_options.capture.end()),
          recorded(static_cast<size_t>(program.num_events), false),
          host_address(program.buffers.size(), nullptr) {}

    const StepOptions& options;
    const std::set<ir::ValueId> capture;
    const Clock::time_point start = Clock::now();
    // With StepOptions::record_timeline, one entry per instruction; each is
    // written once, by the stream that runs it (a free by the stream that
    // releases its bytes, with `mutex` held).
    std::vector<program::InstructionTiming> timeline;

    std::mutex mutex;
    std::condition_variable changed;
    std::atomic<bool> failed{false};
    absl::Status first_error;
    std::vector<bool> recorded;                                // per event
    std::vector<size_t> pending_frees;                         // reached, waiting for their events
    std::map<int64_t, std::pair<int64_t, BufferId>> resident;  // offset -> (end, buffer)
    int64_t resident_bytes = 0;
    int64_t peak_resident_bytes = 0;
    int64_t high_water = 0;
    std::array<bool, program::kNumStreams> reached_commit{};

    std::vector<void*> host_address;  // per host buffer, while it holds a spilled tensor
    std::array<StreamStats, program::kNumStreams> stats{};
    std::map<ir::ValueId, std::vector<std::byte>> captured;
  };

  std::byte* Address(BufferId buffer) const { return arena_ + program_.buffer(buffer).offset; }
  // The kernels' workspace region of the arena, or null where there is none.
  std::byte* Workspace() const {
    return program_.workspace_bytes > 0 ? arena_ + program_.workspace_offset : nullptr;
  }
  // What kernel `instruction` may use: the workspace region, and its own
  // scratch buffer where the Program gives it one.
  backends::KernelCall Call(const Instruction& instruction, size_t index,
                            backends::KernelContext context) const {
    const bool scratch = instruction.scratch != program::kNoBuffer;
    return {program_.graph->node(instruction.node),
            kernel_inputs_[index],
            kernel_outputs_[index],
            context,
            Workspace(),
            program_.workspace_bytes,
            scratch ? Address(instruction.scratch) : nullptr,
            scratch ? program_.buffer(instruction.scratch).bytes : 0};
  }

  void PrepareEvents();
  void RunStream(Stream stream, Step& step);
  absl::Status Execute(size_t index, Step& step);
  absl::Status RunKernel(size_t index, Step& step);
  absl::Status RunCopy(size_t index, Step& step);
  void Fail(Step& step, absl::Status status);
  void WaitForEvents(std::span<const EventId> events, Stream stream, Step& step);
  void Record(EventId event, Stream stream, Step& step);
  void ReachFree(size_t index, Step& step);
  void CommitBarrier(Step& step);
  void ReachCommit(Stream stream, Step& step);
  // With step.mutex held.
  bool Recorded(std::span<const EventId> events, const Step& step) const;
  absl::Status Allocate(BufferId buffer, Step& step);
  void ApplyFree(size_t index, Step& step);
  void ApplyReadyFrees(Step& step);

  const Program& program_;
  Backend& backend_;
  std::byte* arena_ = nullptr;
  HostPool host_pool_{backend_};

  // Derived from the Program once.
  std::array<std::vector<size_t>, program::kNumStreams> stream_instructions_;
  std::vector<std::vector<TensorRef>> kernel_inputs_;   // per compute instruction
  std::vector<std::vector<TensorRef>> kernel_outputs_;  // per compute instruction
  // FaultInjection counts copies and host allocations in Program order, which
  // is the same every step whatever order the streams run them in.
  std::vector<int64_t> copy_ordinal_;        // per copy: its rank among the Program's copies
  std::vector<int64_t> host_alloc_ordinal_;  // per spill that first writes its host buffer
  std::vector<std::vector<BufferId>> host_release_after_;  // host buffers read last here
  // Per event: whether the backend must record it on its stream (a wait
  // depends on it), and the backend events a wait for it waits for on the
  // device: the event itself and, for a free's event, those of the free's
  // own waits (a free does not hold up its stream, so its event alone does
  // not cover the readers on other streams).
  std::vector<bool> device_recorded_;
  std::vector<std::vector<EventId>> device_waits_;
  // The first update-phase compute (the commit point), or the Program's end,
  // and how many instructions of each stream come before it.
  size_t commit_index_ = 0;
  std::array<size_t, program::kNumStreams> commit_position_{};
  std::vector<BufferId> snapshot_buffers_;  // persistent buffers written before the commit
  std::map<ir::ValueId, BufferId> persistent_;
  std::map<ir::ValueId, BufferId> outputs_;
  std::set<ir::ValueId> computed_;  // values some compute instruction writes
  bool outputs_valid_ = false;
};

namespace {

// The arena and the host pool against what the machine has, before either is
// allocated: past it, Linux would hand out the memory and kill the process
// when the pages are touched.
absl::Status CheckMachineMemory(const Program& program, const backends::AvailableMemory& free) {
  const auto too_large = [](std::string_view what, int64_t needed, int64_t available) {
    return absl::ResourceExhaustedError(fmt::format(
        "the Program needs {} of {} but this machine has {} available; lower the batch or the "
        "image size, or plan for a smaller budget",
        FormatBytes(needed), what, FormatBytes(available)));
  };
  if (free.shared) {
    const int64_t needed = SaturatingAdd(program.arena_bytes, program.host_bytes);
    if (free.host_bytes && needed > *free.host_bytes) {
      return too_large("memory (arena and host pool)", needed, *free.host_bytes);
    }
    return absl::OkStatus();
  }
  if (free.device_bytes && program.arena_bytes > *free.device_bytes) {
    return too_large("device memory (its arena)", program.arena_bytes, *free.device_bytes);
  }
  if (free.host_bytes && program.host_bytes > *free.host_bytes) {
    return too_large("host memory (its spilled tensors)", program.host_bytes, *free.host_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Runtime::Impl::Check(int64_t budget_bytes) {
  const Program& program = program_;
  if (program.graph == nullptr) return absl::InvalidArgumentError("the Program has no graph");
  if (program.arena_bytes > budget_bytes) {
    return absl::ResourceExhaustedError(fmt::format(
        "the Program's arena needs {} ({} bytes) but the device budget is {} ({} bytes)",
        FormatBytes(program.arena_bytes), program.arena_bytes, FormatBytes(budget_bytes),
        budget_bytes));
  }
  RETURN_IF_ERROR(CheckMachineMemory(program, backend_.Available()));
  RETURN_IF_ERROR(Annotate(program::VerifyProgram(program), "the Program does not verify"));
  std::set<ir::NodeId> checked;
  for (const Instruction& instruction : program.instructions) {
    if (instruction.node == ir::kNoNode || !checked.insert(instruction.node).second) continue;
    const ir::Node& node = program.graph->node(instruction.node);
    if (absl::Status supported = backend_.CheckSupported(*program.graph, node); !supported.ok()) {
      return absl::FailedPreconditionError(
          fmt::format("the {} backend cannot run node '{}' ({}): {}", backend_.name(), node.name,
                      ir::OpName(node.op), StatusMessage(supported)));
    }
  }
  if (program.alignment % backend_.alignment() != 0) {
    return absl::FailedPreconditionError(fmt::format(
        "the Program places device buffers at multiples of {} bytes; the {} backend needs "
        "multiples of {}",
        program.alignment, backend_.name(), backend_.alignment()));
  }

  // The commit point: the first update (the verifier has checked that no
  // copy comes after it).
  commit_index_ = program.instructions.size();
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind == InstructionKind::kCompute &&
        program.graph->node(instruction.node).phase == ir::Phase::kUpdate) {
      commit_index_ = i;
      break;
    }
  }
  // A graph output is read from the buffer its producer wrote, which the
  // verifier has checked still holds it at the end of the step.
  for (ir::ValueId output : program.graph->outputs()) {
    const ir::Value& value = program.graph->value(output);
    if (value.producer == ir::kNoNode) continue;  // a graph input: persistent
    for (const Instruction& instruction : program.instructions) {
      if (instruction.kind == InstructionKind::kCompute && instruction.node == value.producer) {
        outputs_[output] = instruction.writes[static_cast<size_t>(value.output_index)];
      }
    }
  }
  return absl::OkStatus();
}

void Runtime::Impl::PrepareEvents() {
  const Program& program = program_;
  const size_t events = static_cast<size_t>(program.num_events);
  std::vector<const Instruction*> recorder(events, nullptr);
  for (const Instruction& instruction : program.instructions) {
    if (instruction.record != kNoEvent) {
      recorder[static_cast<size_t>(instruction.record)] = &instruction;
    }
  }
  // Expands an event through the frees that record it, memoized; the
  // verifier has checked that events form no cycle.
  device_waits_.assign(events, {});
  std::vector<bool> expanded(events, false);
  const auto expand = [&](auto&& self, EventId event) -> const std::vector<EventId>& {
    const size_t e = static_cast<size_t>(event);
    if (expanded[e]) return device_waits_[e];
    expanded[e] = true;
    std::vector<EventId> waits = {event};
    const Instruction* free = recorder[e];
    if (free != nullptr && free->kind == InstructionKind::kFree) {
      for (EventId inner : free->waits) {
        const std::vector<EventId>& more = self(self, inner);
        waits.insert(waits.end(), more.begin(), more.end());
      }
    }
    std::sort(waits.begin(), waits.end());
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
    return device_waits_[e] = std::move(waits);
  };
  device_recorded_.assign(events, false);
  for (const Instruction& instruction : program.instructions) {
    // A free's waits are not its stream's: they are expanded where its event is.
    if (instruction.kind == InstructionKind::kFree) continue;
    for (EventId event : instruction.waits) {
      for (EventId device : expand(expand, event)) {
        device_recorded_[static_cast<size_t>(device)] = true;
      }
    }
  }
}

absl::Status Runtime::Impl::Prepare() {
  const Program& program = program_;
  const ir::Graph& graph = *program.graph;
  if (program.arena_bytes > 0) {
    ASSIGN_OR_RETURN(void* arena, backend_.AllocateDevice(program.arena_bytes));
    arena_ = static_cast<std::byte*>(arena);
  }

  const size_t count = program.instructions.size();
  kernel_inputs_.resize(count);
  kernel_outputs_.resize(count);
  copy_ordinal_.assign(count, -1);
  host_alloc_ordinal_.assign(count, -1);
  host_release_after_.resize(count);
  std::vector<bool> host_written(program.buffers.size(), false);
  std::vector<size_t> last_host_read(program.buffers.size(), count);
  int64_t copies = 0;
  int64_t host_allocations = 0;
  for (size_t i = 0; i < count; ++i) {
    const Instruction& instruction = program.instructions[i];
    stream_instructions_[StreamIndex(instruction.stream)].push_back(i);
    if (i < commit_index_) ++commit_position_[StreamIndex(instruction.stream)];
    switch (instruction.kind) {
      case InstructionKind::kAlloc:
      case InstructionKind::kFree:
        break;
      case InstructionKind::kCompute:
      case InstructionKind::kRecompute: {
        // Types follow the values read (a recomputed batch norm's saved
        // statistics after its inputs: program::ReadValue).
        const ir::Node& node = graph.node(instruction.node);
        for (size_t k = 0; k < instruction.reads.size(); ++k) {
          const ir::ValueId value = program::ReadValue(graph, instruction, k);
          const BufferId buffer = instruction.reads[k];
          kernel_inputs_[i].push_back(
              {&graph.value(value).type, buffer == kNoBuffer ? nullptr : Address(buffer)});
        }
        for (size_t k = 0; k < instruction.writes.size(); ++k) {
          const BufferId buffer = instruction.writes[k];
          kernel_outputs_[i].push_back({&graph.value(node.outputs[k]).type,
                                        buffer == kNoBuffer ? nullptr : Address(buffer)});
          if (instruction.kind == InstructionKind::kCompute) computed_.insert(node.outputs[k]);
          if (buffer != kNoBuffer && program.buffer(buffer).persistent && i < commit_index_) {
            snapshot_buffers_.push_back(buffer);
          }
        }
        break;
      }
      case InstructionKind::kCopyToHost:
      case InstructionKind::kCopyToDevice: {
        copy_ordinal_[i] = copies++;
        const BufferId host = instruction.kind == InstructionKind::kCopyToHost
                                  ? instruction.writes[0]
                                  : instruction.reads[0];
        if (instruction.kind == InstructionKind::kCopyToHost) {
          if (!host_written[static_cast<size_t>(host)]) host_alloc_ordinal_[i] = host_allocations++;
          host_written[static_cast<size_t>(host)] = true;
        } else {
          last_host_read[static_cast<size_t>(host)] = i;
        }
        break;
      }
    }
  }
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    if (last_host_read[b] < count) {
      host_release_after_[last_host_read[b]].push_back(static_cast<BufferId>(b));
    }
  }
  PrepareEvents();
  RETURN_IF_ERROR(backend_.Prepare(program));
  for (size_t i = 0; i < count; ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind != InstructionKind::kCompute &&
        instruction.kind != InstructionKind::kRecompute) {
      continue;
    }
    RETURN_IF_ERROR(backend_.PrepareKernel(Call(instruction, i, {})));
  }
  std::sort(snapshot_buffers_.begin(), snapshot_buffers_.end());
  snapshot_buffers_.erase(std::unique(snapshot_buffers_.begin(), snapshot_buffers_.end()),
                          snapshot_buffers_.end());
  for (const Buffer& buffer : program.buffers) {
    if (buffer.persistent && buffer.memory == Memory::kDevice)
      persistent_[buffer.value] = buffer.id;
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Runtime::Impl::RunStep(const StepOptions& options) {
  for (ir::ValueId value : options.capture) {
    if (!computed_.contains(value)) {
      return absl::InvalidArgumentError(fmt::format(
          "cannot capture value {}: no compute instruction of the Program writes it", value));
    }
  }
  const Clock::time_point start = Clock::now();
  // The persistent bytes the step may change before its commit point (the
  // running statistics of batch norm), to put back if it fails.
  std::vector<std::vector<std::byte>> snapshots;
  for (BufferId buffer : snapshot_buffers_) {
    std::vector<std::byte>& bytes =
        snapshots.emplace_back(static_cast<size_t>(program_.buffer(buffer).bytes));
    RETURN_IF_ERROR(
        backend_.Download(bytes.data(), Address(buffer), program_.buffer(buffer).bytes));
  }

  Step step(options, program_);
  if (options.record_timeline) step.timeline.resize(program_.instructions.size());
  for (Stream stream : {Stream::kDeviceToHost, Stream::kHostToDevice}) {
    step.reached_commit[StreamIndex(stream)] = commit_position_[StreamIndex(stream)] == 0;
  }
  host_pool_.TakePeak();
  {
    // The compute stream runs on this thread, the copy streams on their own.
    std::vector<std::jthread> copy_threads;
    for (Stream stream : {Stream::kDeviceToHost, Stream::kHostToDevice}) {
      if (stream_instructions_[StreamIndex(stream)].empty()) continue;
      copy_threads.emplace_back([this, stream, &step] { RunStream(stream, step); });
    }
    RunStream(Stream::kCompute, step);
  }

  // Spilled tensors that nothing fetched back, or whose fetch never ran.
  for (size_t b = 0; b < step.host_address.size(); ++b) {
    if (step.host_address[b] != nullptr) {
      host_pool_.Release(step.host_address[b], program_.buffers[b].bytes);
    }
  }
  const int64_t peak_host_bytes = host_pool_.TakePeak();

  if (step.failed) {
    outputs_valid_ = false;
    for (size_t k = 0; k < snapshot_buffers_.size(); ++k) {
      const Buffer& buffer = program_.buffer(snapshot_buffers_[k]);
      RETURN_IF_ERROR(
          Annotate(backend_.Upload(Address(buffer.id), snapshots[k].data(), buffer.bytes),
                   fmt::format("restoring '{}' after a failed step ({})",
                               BufferName(program_, buffer), StatusMessage(step.first_error))));
    }
    return step.first_error;
  }
  outputs_valid_ = true;

  StepResult result;
  result.seconds = SecondsSince(start);
  for (const StreamStats& stats : step.stats) {
    result.compute_seconds += stats.compute_seconds;
    result.recompute_seconds += stats.recompute_seconds;
    result.bytes_to_host += stats.bytes_to_host;
    result.bytes_to_device += stats.bytes_to_device;
  }
  result.arena_high_water = step.high_water;
  result.peak_resident_bytes = step.peak_resident_bytes;
  result.peak_host_bytes = peak_host_bytes;
  result.captured = std::move(step.captured);
  result.node_seconds = std::move(step.stats[StreamIndex(Stream::kCompute)].node_seconds);
  result.timeline = std::move(step.timeline);
  return result;
}

// Runs one stream's instructions in order. After the first failure of any
// stream it runs nothing more but still records its events, so that no
// stream waits forever.
void Runtime::Impl::RunStream(Stream stream, Step& step) {
  const std::vector<size_t>& indices = stream_instructions_[StreamIndex(stream)];
  for (size_t position = 0; position < indices.size(); ++position) {
    const size_t index = indices[position];
    const Instruction& instruction = program_.instructions[index];
    if (instruction.kind == InstructionKind::kFree) {
      ReachFree(index, step);
    } else {
      WaitForEvents(instruction.waits, stream, step);
      if (index == commit_index_) CommitBarrier(step);
      if (!step.failed) {
        // The clock is read only for a step that records its timeline.
        const bool timed = !step.timeline.empty();
        const double started_s = timed ? SecondsSince(step.start) : 0;
        absl::Status status = Execute(index, step);
        if (!status.ok()) Fail(step, Annotate(status, Describe(program_, index)));
        if (timed) step.timeline[index] = {started_s, SecondsSince(step.start)};
      }
      Record(instruction.record, stream, step);
      if (!step.failed && !host_release_after_[index].empty()) {
        // The copy must be done with the host bytes before they go back.
        absl::Status synchronized = backend_.SynchronizeStream(stream);
        if (!synchronized.ok()) Fail(step, Annotate(synchronized, Describe(program_, index)));
        for (BufferId host : host_release_after_[index]) {
          void*& address = step.host_address[static_cast<size_t>(host)];
          host_pool_.Release(address, program_.buffer(host).bytes);
          address = nullptr;
        }
      }
    }
    if (stream != Stream::kCompute && position + 1 == commit_position_[StreamIndex(stream)]) {
      ReachCommit(stream, step);
    }
  }
  if (!step.failed) {
    absl::Status synchronized = backend_.SynchronizeStream(stream);
    if (!synchronized.ok()) {
      Fail(step, Annotate(synchronized,
                          fmt::format("at the end of the {} stream", program::StreamName(stream))));
    }
  }
}

absl::Status Runtime::Impl::Execute(size_t index, Step& step) {
  const Instruction& instruction = program_.instructions[index];
  switch (instruction.kind) {
    case InstructionKind::kAlloc: {
      std::lock_guard<std::mutex> lock(step.mutex);
      return Allocate(instruction.buffer, step);
    }
    case InstructionKind::kCompute:
    case InstructionKind::kRecompute:
      return RunKernel(index, step);
    case InstructionKind::kCopyToHost:
    case InstructionKind::kCopyToDevice:
      return RunCopy(index, step);
    case InstructionKind::kFree:
      break;
  }
  SPILLWAY_CHECK(false, "frees are not executed like other instructions");
  return absl::OkStatus();
}

absl::Status Runtime::Impl::RunKernel(size_t index, Step& step) {
  const Instruction& instruction = program_.instructions[index];
  const ir::Node& node = program_.graph->node(instruction.node);
  const backends::KernelCall call = Call(instruction, index, {step.options.step});
  StreamStats& stats = step.stats[StreamIndex(Stream::kCompute)];
  const Clock::time_point start = Clock::now();
  RETURN_IF_ERROR(backend_.RunKernel(Stream::kCompute, call));
  const double seconds = SecondsSince(start);
  stats.compute_seconds += seconds;
  if (instruction.kind == InstructionKind::kRecompute) {
    stats.recompute_seconds += seconds;
    return absl::OkStatus();
  }
  if (step.options.time_nodes) {
    if (stats.node_seconds.empty()) {
      stats.node_seconds.assign(static_cast<size_t>(program_.graph->num_nodes()), -1.0);
    }
    stats.node_seconds[static_cast<size_t>(node.id)] = seconds;
  }
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ir::ValueId value = node.outputs[k];
    if (!step.capture.contains(value) || instruction.writes[k] == kNoBuffer) continue;
    RETURN_IF_ERROR(backend_.SynchronizeStream(Stream::kCompute));
    const Buffer& buffer = program_.buffer(instruction.writes[k]);
    const int64_t bytes = program_.graph->value(value).type.bytes();
    std::vector<std::byte>& captured = step.captured[value];
    captured.resize(static_cast<size_t>(bytes));
    RETURN_IF_ERROR(Annotate(backend_.Download(captured.data(), Address(buffer.id), bytes),
                             fmt::format("capturing '{}'", program_.graph->value(value).name)));
  }
  return absl::OkStatus();
}

absl::Status Runtime::Impl::RunCopy(size_t index, Step& step) {
  const Instruction& instruction = program_.instructions[index];
  const bool to_host = instruction.kind == InstructionKind::kCopyToHost;
  const Buffer& source = program_.buffer(instruction.reads[0]);
  const Buffer& destination = program_.buffer(instruction.writes[0]);
  void*& host = step.host_address[static_cast<size_t>((to_host ? destination : source).id)];
  const int64_t host_allocation = host_alloc_ordinal_[index];
  if (host_allocation >= 0) {
    if (host_allocation == step.options.faults.fail_host_allocation) {
      return absl::ResourceExhaustedError(
          fmt::format("no host memory for '{}' ({} bytes): injected failure of host allocation {}",
                      BufferName(program_, destination), destination.bytes, host_allocation));
    }
    absl::StatusOr<void*> block = host_pool_.Acquire(destination.bytes);
    if (!block.ok()) {
      return absl::ResourceExhaustedError(
          fmt::format("no host memory for '{}' ({} bytes): {}", BufferName(program_, destination),
                      destination.bytes, StatusMessage(block.status())));
    }
    host = *block;
  }
  SPILLWAY_CHECK(host != nullptr, "a fetch reads a host buffer its spill has filled");
  if (copy_ordinal_[index] == step.options.faults.fail_copy) {
    return absl::UnavailableError(
        fmt::format("injected failure of copy {} of the step", copy_ordinal_[index]));
  }
  void* to = to_host ? host : static_cast<void*>(Address(destination.id));
  const void* from = to_host ? static_cast<const void*>(Address(source.id)) : host;
  RETURN_IF_ERROR(backend_.Copy(instruction.stream, to, from, source.bytes));
  StreamStats& stats = step.stats[StreamIndex(instruction.stream)];
  (to_host ? stats.bytes_to_host : stats.bytes_to_device) += source.bytes;
  return absl::OkStatus();
}

void Runtime::Impl::Fail(Step& step, absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(step.mutex);
    if (step.failed) return;
    step.first_error = std::move(status);
    step.failed = true;
  }
  step.changed.notify_all();
}

bool Runtime::Impl::Recorded(std::span<const EventId> events, const Step& step) const {
  return std::all_of(events.begin(), events.end(),
                     [&](EventId event) { return step.recorded[static_cast<size_t>(event)]; });
}

// The host waits only until the events are recorded, that is, enqueued on
// their streams; the stream then waits for them on the device, so that an
// asynchronous backend overlaps the streams as the Program says.
void Runtime::Impl::WaitForEvents(std::span<const EventId> events, Stream stream, Step& step) {
  if (events.empty()) return;
  {
    std::unique_lock<std::mutex> lock(step.mutex);
    step.changed.wait(lock, [&] { return step.failed || Recorded(events, step); });
  }
  if (step.failed) return;
  for (EventId event : events) {
    for (EventId device : device_waits_[static_cast<size_t>(event)]) {
      absl::Status waited = backend_.WaitEvent(stream, device);
      if (!waited.ok()) {
        Fail(step, Annotate(waited, fmt::format("the {} stream waiting for event {}",
                                                program::StreamName(stream), device)));
        return;
      }
    }
  }
}

void Runtime::Impl::Record(EventId event, Stream stream, Step& step) {
  if (event == kNoEvent) return;
  if (!step.failed && device_recorded_[static_cast<size_t>(event)]) {
    absl::Status recorded = backend_.RecordEvent(stream, event);
    if (!recorded.ok()) {
      Fail(step, Annotate(recorded, fmt::format("recording event {} on the {} stream", event,
                                                program::StreamName(stream))));
    }
  }
  {
    std::lock_guard<std::mutex> lock(step.mutex);
    step.recorded[static_cast<size_t>(event)] = true;
    if (!step.failed) ApplyReadyFrees(step);
  }
  step.changed.notify_all();
}

// A free does not hold up its stream: it takes effect now if its events are
// recorded, else when the last of them is (ApplyReadyFrees, on the thread
// that records it).
void Runtime::Impl::ReachFree(size_t index, Step& step) {
  const Instruction& free = program_.instructions[index];
  if (!step.failed && free.record != kNoEvent &&
      device_recorded_[static_cast<size_t>(free.record)]) {
    // Marks, on the device, where the stream is done with the bytes; an alloc
    // that takes them over waits for it and for the free's own waits.
    absl::Status recorded = backend_.RecordEvent(free.stream, free.record);
    if (!recorded.ok()) Fail(step, Annotate(recorded, Describe(program_, index)));
  }
  {
    std::lock_guard<std::mutex> lock(step.mutex);
    if (step.failed) {
      if (free.record != kNoEvent) step.recorded[static_cast<size_t>(free.record)] = true;
    } else if (Recorded(free.waits, step)) {
      ApplyFree(index, step);
      ApplyReadyFrees(step);
    } else {
      step.pending_frees.push_back(index);
      return;  // nothing recorded yet: nobody to wake
    }
  }
  step.changed.notify_all();
}

void Runtime::Impl::ApplyFree(size_t index, Step& step) {
  const Instruction& free = program_.instructions[index];
  const Buffer& buffer = program_.buffer(free.buffer);
  if (buffer.bytes > 0) {
    step.resident.erase(buffer.offset);
    step.resident_bytes -= buffer.bytes;
  }
  if (!step.timeline.empty()) {
    const double now_s = SecondsSince(step.start);
    step.timeline[index] = {now_s, now_s};
  }
  if (free.record != kNoEvent) step.recorded[static_cast<size_t>(free.record)] = true;
}

void Runtime::Impl::ApplyReadyFrees(Step& step) {
  // A free's own event can complete another pending free: repeat until none is ready.
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t k = 0; k < step.pending_frees.size(); ++k) {
      const size_t index = step.pending_frees[k];
      if (!Recorded(program_.instructions[index].waits, step)) continue;
      ApplyFree(index, step);
      step.pending_frees.erase(step.pending_frees.begin() + static_cast<std::ptrdiff_t>(k));
      progress = true;
      break;
    }
  }
}

absl::Status Runtime::Impl::Allocate(BufferId id, Step& step) {
  const Buffer& buffer = program_.buffer(id);
  if (buffer.bytes == 0) return absl::OkStatus();
  const int64_t begin = buffer.offset;
  const int64_t end = buffer.offset + buffer.bytes;
  // The Program's events order every reuse of arena bytes after the free of
  // their previous buffer; a buffer still resident here means they do not.
  auto next = step.resident.lower_bound(begin);
  auto clash = step.resident.end();
  if (next != step.resident.end() && next->first < end) clash = next;
  if (next != step.resident.begin() && std::prev(next)->second.first > begin) {
    clash = std::prev(next);
  }
  if (clash != step.resident.end()) {
    const Buffer& other = program_.buffer(clash->second.second);
    return absl::InternalError(
        fmt::format("device buffer '{}' [{}, {}) overlaps '{}' [{}, {}), which is still resident",
                    BufferName(program_, buffer), begin, end, BufferName(program_, other),
                    clash->first, clash->second.first));
  }
  step.resident.emplace(begin, std::make_pair(end, id));
  step.resident_bytes += buffer.bytes;
  step.peak_resident_bytes = std::max(step.peak_resident_bytes, step.resident_bytes);
  step.high_water = std::max(step.high_water, end);
  return absl::OkStatus();
}

// Before the first update: every copy of the step is done, and nothing has
// failed. From here on, only the update nodes change persistent state.
void Runtime::Impl::CommitBarrier(Step& step) {
  if (step.failed) return;
  absl::Status synchronized = backend_.SynchronizeStream(Stream::kCompute);
  if (!synchronized.ok()) {
    Fail(step, Annotate(synchronized, "synchronizing the compute stream before the updates"));
    return;
  }
  std::unique_lock<std::mutex> lock(step.mutex);
  step.changed.wait(lock, [&] {
    return step.failed || (step.reached_commit[StreamIndex(Stream::kDeviceToHost)] &&
                           step.reached_commit[StreamIndex(Stream::kHostToDevice)]);
  });
}

void Runtime::Impl::ReachCommit(Stream stream, Step& step) {
  if (!step.failed) {
    absl::Status synchronized = backend_.SynchronizeStream(stream);
    if (!synchronized.ok()) {
      Fail(step, Annotate(synchronized,
                          fmt::format("synchronizing the {} stream", program::StreamName(stream))));
    }
  }
  {
    std::lock_guard<std::mutex> lock(step.mutex);
    step.reached_commit[StreamIndex(stream)] = true;
  }
  step.changed.notify_all();
}

absl::Status Runtime::Impl::Write(ir::ValueId value, std::span<const std::byte> bytes) {
  auto it = persistent_.find(value);
  if (it == persistent_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("value {} is not a persistent value of the Program", value));
  }
  const Buffer& buffer = program_.buffer(it->second);
  if (static_cast<int64_t>(bytes.size()) != buffer.bytes) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' has {} bytes, not {}", BufferName(program_, buffer), buffer.bytes, bytes.size()));
  }
  return backend_.Upload(Address(buffer.id), bytes.data(), buffer.bytes);
}

absl::Status Runtime::Impl::Read(ir::ValueId value, std::span<std::byte> bytes) const {
  BufferId id = kNoBuffer;
  if (auto it = persistent_.find(value); it != persistent_.end()) {
    id = it->second;
  } else if (auto output = outputs_.find(value); output != outputs_.end()) {
    if (!outputs_valid_) {
      return absl::FailedPreconditionError(
          fmt::format("graph output '{}' has no value: no step has succeeded since the last "
                      "one failed, or none has run",
                      program_.graph->value(value).name));
    }
    id = output->second;
  } else {
    return absl::InvalidArgumentError(fmt::format(
        "value {} is neither persistent nor a graph output (capture it during the step)", value));
  }
  const Buffer& buffer = program_.buffer(id);
  const int64_t expected = program_.graph->value(value).type.bytes();
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return absl::InvalidArgumentError(fmt::format(
        "'{}' has {} bytes, not {}", program_.graph->value(value).name, expected, bytes.size()));
  }
  return backend_.Download(bytes.data(), Address(buffer.id), expected);
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const program::Program& program,
                                                         backends::Backend& backend,
                                                         int64_t budget_bytes) {
  auto impl = std::make_unique<Impl>(program, backend);
  RETURN_IF_ERROR(impl->Check(budget_bytes));
  RETURN_IF_ERROR(impl->Prepare());
  return std::unique_ptr<Runtime>(new Runtime(program, std::move(impl)));
}

Runtime::Runtime(const program::Program& program, std::unique_ptr<Impl> impl)
    : program_(program), impl_(std::move(impl)) {}

Runtime::~Runtime() = default;

absl::Status Runtime::Write(ir::ValueId value, std::span<const std::byte> bytes) {
  return impl_->Write(value, bytes);
}

absl::Status Runtime::Read(ir::ValueId value, std::span<std::byte> bytes) const {
  return impl_->Read(value, bytes);
}

absl::StatusOr<StepResult> Runtime::RunStep(const StepOptions& options) {
  return impl_->RunStep(options);
}

}  // namespace spillway::runtime
