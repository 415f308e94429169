#include "program/rewriter.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "ir/op_registry.h"
#include "support/check.h"
#include "support/status_macros.h"

namespace spillway::program {

ScheduleReads ScheduleReads::Of(const ir::Graph& graph, const std::vector<ir::NodeId>& schedule) {
  const size_t num_values = static_cast<size_t>(graph.num_values());
  ScheduleReads reads;
  reads.step_of_node.assign(static_cast<size_t>(graph.num_nodes()), -1);
  reads.last_read.assign(num_values, -1);
  reads.last_forward_read.assign(num_values, -1);
  reads.first_backward_read.assign(num_values, kNever);
  for (int step = 0; step < static_cast<int>(schedule.size()); ++step) {
    const ir::Node& node = graph.node(schedule[static_cast<size_t>(step)]);
    reads.step_of_node[static_cast<size_t>(node.id)] = step;
    for (ir::ValueId input : node.inputs) {
      const size_t v = static_cast<size_t>(input);
      reads.last_read[v] = std::max(reads.last_read[v], step);
      if (node.phase == ir::Phase::kForward) {
        reads.last_forward_read[v] = std::max(reads.last_forward_read[v], step);
      } else {
        reads.first_backward_read[v] = std::min(reads.first_backward_read[v], step);
      }
    }
  }
  return reads;
}

namespace {

constexpr int kForever = ScheduleReads::kNever;

class Rewriter {
 public:
  Rewriter(const ir::Graph& graph, const RewriteSetup& setup, const Plan& plan)
      : graph_(graph), setup_(setup), plan_(plan), reads_(setup.reads) {
    program_.graph = &graph;
    program_.schedule = setup.schedule;
    // Reserved so that building seldom moves them (the frees are merged in
    // afterwards, in place): about one buffer per value and three
    // instructions per step (the compute, an alloc for each output and for
    // its scratch); a spill adds a host buffer, the copy out, and per fetch
    // a device buffer, its alloc and the copy back; a recomputation its
    // buffer, alloc and kernel per rebuild.
    const auto spilled = static_cast<size_t>(plan.Count(Decision::kSpill));
    const auto recomputed = static_cast<size_t>(plan.Count(Decision::kRecompute));
    const size_t buffers = static_cast<size_t>(graph.num_values()) + 3 * spilled + 2 * recomputed;
    program_.buffers.reserve(buffers);
    // And a free per buffer, merged in last (InsertFrees).
    program_.instructions.reserve(3 * program_.schedule.size() + 5 * spilled + 3 * recomputed +
                                  buffers);
  }

  absl::StatusOr<Program> Run() {
    RETURN_IF_ERROR(CheckPlan());
    Analyze();
    AllocatePersistent();
    auto fetch = fetches_.begin();
    for (int step = 0; step < static_cast<int>(program_.schedule.size()); ++step) {
      for (; fetch != fetches_.end() && fetch->step == step; ++fetch) {
        if (Resident(fetch->value, step) == kNoBuffer) EmitFetch(fetch->value, step);
      }
      RETURN_IF_ERROR(EmitCompute(step));
    }
    InsertFrees();
    return std::move(program_);
  }

 private:
  // The setup's answers, by value (plan.h's functions of the same names).
  bool CanSpill(ir::ValueId value) const { return setup_.can_spill[static_cast<size_t>(value)]; }
  bool CanSpillBetweenReads(ir::ValueId value) const {
    return setup_.can_spill_between_reads[static_cast<size_t>(value)];
  }
  bool CanRecompute(ir::ValueId value) const {
    return setup_.can_recompute[static_cast<size_t>(value)];
  }

  // What a rewrite reads of a node.
  struct NodeView {
    ir::NodeId id = 0;
    ir::OpKind op = ir::OpKind::kRelu;
    std::span<const ir::ValueId> inputs;
    std::span<const ir::ValueId> outputs;
  };
  // The node scheduled at `step`, from the setup's arrays.
  NodeView StepNode(int step) const {
    const auto s = static_cast<size_t>(step);
    const auto in = static_cast<size_t>(setup_.input_begin[s]);
    const auto out = static_cast<size_t>(setup_.output_begin[s]);
    return {
        program_.schedule[s], setup_.op[s],
        std::span(setup_.inputs).subspan(in, static_cast<size_t>(setup_.input_begin[s + 1]) - in),
        std::span(setup_.outputs)
            .subspan(out, static_cast<size_t>(setup_.output_begin[s + 1]) - out)};
  }
  static NodeView ViewOf(const ir::Node& node) {
    return {node.id, node.op, node.inputs, node.outputs};
  }

  struct Live {
    BufferId buffer = kNoBuffer;
    int expires_after = -1;  // the last step at which the buffer may still be read
  };

  absl::Status CheckPlan() const {
    if (plan_.size() != static_cast<size_t>(graph_.num_values())) {
      return absl::InvalidArgumentError(fmt::format(
          "the plan covers {} values but the graph has {}", plan_.size(), graph_.num_values()));
    }
    // By id, from the plan and the setup alone: the graph's values are read
    // only to name one in an error.
    for (ir::ValueId value = 0; value < graph_.num_values(); ++value) {
      const TensorPlan& tensor = plan_.at(value);
      if (tensor.decision == Decision::kSpill && !CanSpill(value) &&
          !(tensor.refetch_after >= 0 && CanSpillBetweenReads(value))) {
        return absl::InvalidArgumentError(fmt::format(
            "the plan spills '{}', which is neither a forward activation nor a gradient "
            "spilled between reads",
            graph_.value(value).name));
      }
      if (tensor.decision == Decision::kRecompute && !CanRecompute(value)) {
        return absl::InvalidArgumentError(fmt::format(
            "the plan recomputes '{}', which cannot be recomputed", graph_.value(value).name));
      }
    }
    return absl::OkStatus();
  }

  void Analyze() {
    const size_t num_values = static_cast<size_t>(graph_.num_values());
    ExtendKeptLifetimes();
    is_output_.assign(num_values, false);
    for (ir::ValueId output : graph_.outputs()) is_output_[static_cast<size_t>(output)] = true;

    live_.assign(num_values, Live{});
    host_copy_.assign(num_values, kNoBuffer);
    host_ready_.assign(num_values, kNoEvent);
    fetches_.clear();
    for (ir::ValueId value = 0; value < graph_.num_values(); ++value) {
      const TensorPlan& tensor = plan_.at(value);
      if (tensor.decision != Decision::kSpill || tensor.fetch_step < 0) continue;
      if (!CanSpill(value)) continue;  // a gradient: fetched just in time
      const size_t v = static_cast<size_t>(value);
      if (reads_.first_backward_read[v] == kForever) continue;  // never read back
      // A fetch cannot start before the forward pass is done with the
      // original, nor later than the first step that reads it back.
      const int produced = reads_.step_of_node[static_cast<size_t>(graph_.value(value).producer)];
      const int earliest = std::max(produced, reads_.last_forward_read[v]) + 1;
      const int step = std::clamp(tensor.fetch_step, earliest, reads_.first_backward_read[v]);
      fetches_.push_back({step, value});
    }
    // By step; at one step, by value id, as they were found.
    std::stable_sort(fetches_.begin(), fetches_.end(),
                     [](const Fetch& a, const Fetch& b) { return a.step < b.step; });
  }

  // What a recomputation of `node` reads, in order; kInvalidValue where it
  // reads nothing. A batch norm is normalized with its saved statistics, not
  // the running ones (which the first run has already updated in place).
  // Inline: it is asked for every recomputation a rewrite makes or plans.
  using ValueIds = absl::InlinedVector<ir::ValueId, 8>;
  static ValueIds RecomputeReads(const ir::Node& node) {
    ValueIds reads(node.inputs.begin(), node.inputs.end());
    if (RecomputeReadsSavedStatistics(node)) {
      reads[3] = reads[4] = ir::kInvalidValue;
      reads.push_back(node.outputs[1]);
      reads.push_back(node.outputs[2]);
    }
    return reads;
  }

  // A kept value that cannot be rebuilt (a batch norm's saved statistics)
  // must outlive every recomputation that reads it. A value is rebuilt when a
  // read finds it gone: a recomputed one at its first backward read (and it
  // then stays to its last), any recomputable one when a recomputation of a
  // consumer needs it after it expired. Walking the schedule backwards gives
  // each value the latest step it may be rebuilt at, and the statistics it
  // reads are kept until then. In autodiff's backward order that is never
  // after their own last reader; in a reordered one a weight gradient, and
  // the recomputations it needs, may run after the batch norm's backward.
  void ExtendKeptLifetimes() {
    keep_until_ = reads_.last_read;
    std::vector<int> rebuilt_until(static_cast<size_t>(graph_.num_values()), -1);
    for (int step = static_cast<int>(program_.schedule.size()) - 1; step >= 0; --step) {
      const NodeView view = StepNode(step);
      if (view.outputs.empty()) continue;
      const size_t out = static_cast<size_t>(view.outputs[0]);
      int latest = rebuilt_until[out];
      switch (plan_.decision(view.outputs[0])) {
        case Decision::kRecompute:
          latest = std::max(latest, reads_.last_read[out]);
          break;
        case Decision::kKeep:
          if (latest <= keep_until_[out]) continue;  // still there
          break;
        case Decision::kSpill:
          continue;  // fetched, not rebuilt
      }
      if (latest < 0) continue;
      for (ir::ValueId input : RecomputeReads(graph_.node(view.id))) {
        if (input == ir::kInvalidValue || plan_.decision(input) == Decision::kSpill) continue;
        const size_t v = static_cast<size_t>(input);
        if (CanRecompute(input)) {
          rebuilt_until[v] = std::max(rebuilt_until[v], latest);
        } else {
          keep_until_[v] = std::max(keep_until_[v], latest);
        }
      }
    }
  }

  BufferId NewBuffer(BufferRole role, ir::ValueId value, Memory memory, bool persistent,
                     int64_t bytes = -1) {
    Buffer buffer;
    buffer.id = static_cast<BufferId>(program_.buffers.size());
    buffer.role = role;
    buffer.value = value;
    buffer.bytes = bytes >= 0 ? bytes : setup_.value_bytes[static_cast<size_t>(value)];
    buffer.memory = memory;
    buffer.persistent = persistent;
    program_.buffers.push_back(std::move(buffer));
    read_by_copy_.push_back(false);
    holder_.push_back(value);
    pending_wait_.push_back(kNoEvent);
    return program_.buffers.back().id;
  }

  int Emit(Instruction instruction) {
    program_.instructions.push_back(std::move(instruction));
    return static_cast<int>(program_.instructions.size()) - 1;
  }

  EventId RecordEvent(int instruction_index) {
    Instruction& instruction = program_.instructions[static_cast<size_t>(instruction_index)];
    if (instruction.record == kNoEvent) instruction.record = program_.num_events++;
    return instruction.record;
  }

  int EmitAlloc(BufferId buffer, Stream stream, int step) {
    // Made in place (GCC reads moving an instruction whose lists were never
    // touched as a read of uninitialized memory).
    Instruction& alloc = program_.instructions.emplace_back();
    alloc.kind = InstructionKind::kAlloc;
    alloc.stream = stream;
    alloc.buffer = buffer;
    alloc.step = step;
    return static_cast<int>(program_.instructions.size()) - 1;
  }

  // The scratch buffer the kernel of `node` declares, allocated just before
  // its instruction (which InsertFrees frees right after, its only access);
  // kNoBuffer where it declares none.
  BufferId EmitScratch(const NodeView& node, int step) {
    const size_t n = static_cast<size_t>(node.id);
    if (n >= setup_.scratch_bytes.size() || setup_.scratch_bytes[n] == 0) return kNoBuffer;
    const BufferId scratch = NewBuffer(BufferRole::kScratch, node.outputs.front(), Memory::kDevice,
                                       false, setup_.scratch_bytes[n]);
    EmitAlloc(scratch, Stream::kCompute, step);
    return scratch;
  }

  void AllocatePersistent() {
    for (ir::ValueId input : graph_.inputs()) {
      const BufferId buffer = NewBuffer(BufferRole::kValue, input, Memory::kDevice, true);
      EmitAlloc(buffer, Stream::kCompute, 0);
      live_[static_cast<size_t>(input)] = {buffer, kForever};
    }
  }

  // The device buffer that holds `value` for a read at `step`, if any.
  BufferId Resident(ir::ValueId value, int step) const {
    const Live& live = live_[static_cast<size_t>(value)];
    return live.expires_after >= step ? live.buffer : kNoBuffer;
  }

  // Until when a buffer made at `step` for `value` must stay: to its last
  // reader, or to the end of the step for a temporary of a recomputation.
  int ExpiryOfRebuilt(ir::ValueId value, int step) const {
    return std::max(step, reads_.last_read[static_cast<size_t>(value)]);
  }

  // A spilled value's device copy, made at `step` (produced, or fetched),
  // stays to `last`, its last read in the same pass, or, where the Plan drops
  // it between reads, to the Plan's step: the next read fetches it again.
  int ExpiryOfSpilled(ir::ValueId value, int step, int last) const {
    const int drop = plan_.at(value).refetch_after;
    if (drop >= step && drop < last) last = drop;
    return std::max(step, last);
  }

  // A copy fetched while the forward pass still reads the value is for the
  // forward pass; the backward pass fetches its own.
  int ExpiryOfFetched(ir::ValueId value, int step) const {
    const size_t v = static_cast<size_t>(value);
    const int last_forward = reads_.last_forward_read[v];
    return ExpiryOfSpilled(value, step, step <= last_forward ? last_forward : reads_.last_read[v]);
  }

  void EmitFetch(ir::ValueId value, int step) {
    const size_t v = static_cast<size_t>(value);
    SPILLWAY_CHECK(host_copy_[v] != kNoBuffer, "a fetched value was spilled first");
    const BufferId device = NewBuffer(BufferRole::kFetch, value, Memory::kDevice, false);
    const int alloc = EmitAlloc(device, Stream::kHostToDevice, step);
    // The fetch is issued when the compute stream reaches its step, not as
    // soon as the copy stream is free: that is when the Plan wants the bytes.
    if (last_compute_ >= 0) {
      const EventId reached = RecordEvent(last_compute_);
      program_.instructions[static_cast<size_t>(alloc)].waits.push_back(reached);
    }
    Instruction copy;
    copy.kind = InstructionKind::kCopyToDevice;
    copy.stream = Stream::kHostToDevice;
    copy.reads = {host_copy_[v]};
    copy.writes = {device};
    copy.waits = {host_ready_[v]};
    copy.step = step;
    const int index = Emit(std::move(copy));
    pending_wait_[static_cast<size_t>(device)] = RecordEvent(index);
    live_[v] = {device, ExpiryOfFetched(value, step)};
  }

  void EmitSpill(ir::ValueId value, int producer_index, int step) {
    const size_t v = static_cast<size_t>(value);
    const BufferId host = NewBuffer(BufferRole::kHost, value, Memory::kHost, false);
    program_.host_bytes += program_.buffer(host).bytes;
    Instruction copy;
    copy.kind = InstructionKind::kCopyToHost;
    copy.stream = Stream::kDeviceToHost;
    copy.reads = {live_[v].buffer};
    read_by_copy_[static_cast<size_t>(live_[v].buffer)] = true;
    copy.writes = {host};
    copy.waits = {RecordEvent(producer_index)};
    copy.step = step;
    const int index = Emit(std::move(copy));
    host_copy_[v] = host;
    host_ready_[v] = RecordEvent(index);
  }

  // The compute stream reads `buffer`: if it was fetched, wait for the copy
  // once; the stream is in order, so later readers need not wait again.
  void AddReadWait(BufferId buffer, EventIds& waits) {
    EventId& pending = pending_wait_[static_cast<size_t>(buffer)];
    if (pending == kNoEvent) return;
    waits.push_back(pending);
    pending = kNoEvent;
  }

  // Makes `value` resident for a read at `step`: fetches it back if it was
  // spilled, else re-runs its producer from resident inputs, rebuilding those
  // first where they are gone too.
  absl::Status Materialize(ir::ValueId value, int step) {
    if (Resident(value, step) != kNoBuffer) return absl::OkStatus();
    const size_t v = static_cast<size_t>(value);
    if (host_copy_[v] != kNoBuffer) {
      EmitFetch(value, step);
      return absl::OkStatus();
    }
    const ir::Value& val = graph_.value(value);
    if (!CanRecompute(value)) {
      return absl::InternalError(fmt::format(
          "'{}' is needed at step {} ({}) but is gone and can be neither fetched nor recomputed",
          val.name, step, graph_.node(program_.schedule[static_cast<size_t>(step)]).name));
    }
    const ir::Node& node = graph_.node(val.producer);
    const ValueIds needed = RecomputeReads(node);
    for (ir::ValueId input : needed) {
      if (input != ir::kInvalidValue) RETURN_IF_ERROR(Materialize(input, step));
    }

    Instruction recompute;
    recompute.kind = InstructionKind::kRecompute;
    recompute.stream = Stream::kCompute;
    recompute.node = node.id;
    recompute.step = step;
    for (ir::ValueId input : needed) {
      const BufferId buffer = input == ir::kInvalidValue ? kNoBuffer : Resident(input, step);
      recompute.reads.push_back(buffer);
      if (buffer == kNoBuffer) continue;
      AddReadWait(buffer, recompute.waits);
    }
    const BufferId rebuilt = NewBuffer(BufferRole::kRecompute, value, Memory::kDevice, false);
    recompute.writes.assign(node.outputs.size(), kNoBuffer);
    recompute.writes[0] = rebuilt;
    EmitAlloc(rebuilt, Stream::kCompute, step);
    recompute.scratch = EmitScratch(ViewOf(node), step);
    Emit(std::move(recompute));
    live_[v] = {rebuilt, ExpiryOfRebuilt(value, step)};
    return absl::OkStatus();
  }

  // An input buffer the node's first output can be written over: the op
  // allows it, the input is of the output's type, nothing reads it after this
  // step, no copy reads it (a spill still in flight would see the new
  // contents), and the node does not also read it as an input it may not
  // write over (a convolution's dy that is its acc too). Saves an
  // allocation for every relu, add and gradient sum.
  BufferId Donation(const NodeView& node, size_t output, const BufferIds& reads, int step) const {
    const ir::OpDef& def = ir::GetOpDef(node.op);
    if (output != 0 || !def.may_overwrite_inputs) return kNoBuffer;
    const int32_t type = setup_.type_class[static_cast<size_t>(node.outputs[0])];
    const auto read_elsewhere = [&](BufferId buffer) {
      for (size_t j = 0; j < reads.size(); ++j) {
        if (reads[j] == buffer && !def.MayOverwrite(j)) return true;
      }
      return false;
    };
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      if (!def.MayOverwrite(k)) continue;
      const ir::ValueId input = node.inputs[k];
      const BufferId buffer = reads[k];
      if (read_elsewhere(buffer)) continue;
      // The cheap tests first: most inputs are read again later.
      if (live_[static_cast<size_t>(input)].expires_after != step) continue;
      const Buffer& candidate = program_.buffer(buffer);
      if (candidate.persistent || read_by_copy_[static_cast<size_t>(buffer)]) continue;
      if (is_output_[static_cast<size_t>(input)] ||
          setup_.type_class[static_cast<size_t>(input)] != type)
        continue;
      return buffer;
    }
    return kNoBuffer;
  }

  int ExpiryOfOutput(ir::ValueId value, int step) const {
    const size_t v = static_cast<size_t>(value);
    if (is_output_[v]) return kForever;
    switch (plan_.decision(value)) {
      case Decision::kKeep:
        return std::max(step, keep_until_[v]);
      case Decision::kSpill:
        // The original serves the forward pass's reads (a gradient's: those
        // up to the plan's step); the backward pass fetches its own.
        return ExpiryOfSpilled(value, step,
                               CanSpill(value) ? reads_.last_forward_read[v] : reads_.last_read[v]);
      case Decision::kRecompute:
        break;
    }
    return std::max(step, reads_.last_forward_read[v]);
  }

  absl::Status EmitCompute(int step) {
    const NodeView node = StepNode(step);
    for (ir::ValueId input : node.inputs) RETURN_IF_ERROR(Materialize(input, step));

    Instruction compute;
    compute.kind = InstructionKind::kCompute;
    compute.stream = Stream::kCompute;
    compute.node = node.id;
    compute.step = step;
    for (ir::ValueId input : node.inputs) {
      const BufferId buffer = Resident(input, step);
      compute.reads.push_back(buffer);
      AddReadWait(buffer, compute.waits);
    }
    const ir::OpDef& def = ir::GetOpDef(node.op);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const ir::ValueId output = node.outputs[i];
      auto in_place = std::find_if(def.in_place.begin(), def.in_place.end(), [&](const auto& pair) {
        return pair.first == static_cast<int>(i);
      });
      BufferId buffer;
      if (in_place != def.in_place.end()) {
        buffer = compute.reads[static_cast<size_t>(in_place->second)];
        live_[static_cast<size_t>(output)] = {buffer, kForever};
      } else if (BufferId donated = Donation(node, i, compute.reads, step); donated != kNoBuffer) {
        buffer = donated;
        live_[static_cast<size_t>(output)] = {buffer, ExpiryOfOutput(output, step)};
      } else {
        buffer = NewBuffer(BufferRole::kValue, output, Memory::kDevice, false);
        EmitAlloc(buffer, Stream::kCompute, step);
        live_[static_cast<size_t>(output)] = {buffer, ExpiryOfOutput(output, step)};
      }
      compute.writes.push_back(buffer);
      holder_[static_cast<size_t>(buffer)] = output;
    }
    compute.scratch = EmitScratch(node, step);
    const int index = Emit(std::move(compute));
    last_compute_ = index;
    for (ir::ValueId output : node.outputs) {
      // Spilled where something reads it back: the backward pass, or a later
      // forward step after the Plan drops it.
      if (plan_.decision(output) == Decision::kSpill &&
          (reads_.first_backward_read[static_cast<size_t>(output)] != kForever ||
           live_[static_cast<size_t>(output)].expires_after <
               reads_.last_forward_read[static_cast<size_t>(output)])) {
        EmitSpill(output, index, step);
      }
    }
    return absl::OkStatus();
  }

  // A free right after each device buffer's last access, on the compute
  // stream; it waits for the copies that touch the buffer, which the compute
  // stream is not ordered with.
  void InsertFrees() {
    const std::vector<Instruction>& instructions = program_.instructions;
    std::vector<int> last_access(program_.buffers.size(), -1);
    // A device buffer's copies: one d2h from a spilled value, one h2d into a
    // fetch; a host buffer's: its d2h and each fetch. Inline, not a heap
    // allocation for each buffer copied.
    std::vector<EventIds> copy_events(program_.buffers.size());
    for (size_t i = 0; i < instructions.size(); ++i) {
      const Instruction& instruction = instructions[i];
      auto touch = [&](BufferId buffer) {
        if (buffer == kNoBuffer) return;
        last_access[static_cast<size_t>(buffer)] = static_cast<int>(i);
        if (instruction.kind == InstructionKind::kCopyToHost ||
            instruction.kind == InstructionKind::kCopyToDevice) {
          copy_events[static_cast<size_t>(buffer)].push_back(instruction.record);
        }
      };
      touch(instruction.buffer);
      touch(instruction.scratch);
      for (BufferId buffer : instruction.reads) touch(buffer);
      for (BufferId buffer : instruction.writes) touch(buffer);
    }
    // The buffers to free after each instruction, in id order: a counting
    // sort of the freed buffers by their last access (a list per instruction
    // was a heap allocation for most of them, thousands per rewrite).
    std::vector<int> frees_from(instructions.size() + 1, 0);  // by instruction, then summed
    std::vector<BufferId> freed;
    for (const Buffer& buffer : program_.buffers) {
      if (buffer.memory != Memory::kDevice || buffer.persistent) continue;
      const ir::ValueId held = holder_[static_cast<size_t>(buffer.id)];
      if (is_output_[static_cast<size_t>(held)] &&
          live_[static_cast<size_t>(held)].buffer == buffer.id) {
        continue;  // a graph output lives to the end of the step
      }
      freed.push_back(buffer.id);
      ++frees_from[static_cast<size_t>(last_access[static_cast<size_t>(buffer.id)]) + 1];
    }
    for (size_t i = 1; i < frees_from.size(); ++i) frees_from[i] += frees_from[i - 1];
    std::vector<BufferId> frees(freed.size());
    {
      std::vector<int> next(frees_from.begin(), frees_from.end() - 1);
      for (const BufferId buffer : freed) {
        const auto last = static_cast<size_t>(last_access[static_cast<size_t>(buffer)]);
        frees[static_cast<size_t>(next[last]++)] = buffer;
      }
    }
    // Merged in place, from the back: each instruction moves once, to its
    // final index, and no second list of a whole step's instructions is
    // allocated (the constructor reserves room for the frees).
    std::vector<Instruction>& merged = program_.instructions;
    const size_t count = merged.size();
    merged.resize(count + frees.size());
    size_t at = merged.size();
    for (size_t i = count; i-- > 0;) {
      const int step = merged[i].step;
      for (int k = frees_from[i + 1]; k-- > frees_from[i];) {
        const BufferId buffer = frees[static_cast<size_t>(k)];
        // The slot may hold an instruction already moved on: made afresh.
        Instruction* const slot = &merged[--at];
        std::destroy_at(slot);
        Instruction& free = *std::construct_at(slot);
        free.kind = InstructionKind::kFree;
        free.stream = Stream::kCompute;
        free.buffer = buffer;
        free.step = step;
        for (EventId event : copy_events[static_cast<size_t>(buffer)]) {
          SPILLWAY_CHECK(event != kNoEvent, "every copy records an event");
          free.waits.push_back(event);
        }
      }
      if (--at != i) merged[at] = std::move(merged[i]);
    }
  }

  const ir::Graph& graph_;
  const RewriteSetup& setup_;
  const Plan& plan_;
  const ScheduleReads& reads_;  // setup_.reads
  Program program_;
  std::vector<int> keep_until_;  // per value: the last step a kept value is read
  std::vector<bool> is_output_;
  std::vector<Live> live_;
  std::vector<BufferId> host_copy_;
  std::vector<EventId> host_ready_;
  std::vector<EventId> pending_wait_;  // per buffer: a fetch's event no reader has waited on
  int last_compute_ = -1;              // the latest compute instruction emitted
  std::vector<bool> read_by_copy_;     // per buffer: a spill copy reads it
  std::vector<ir::ValueId> holder_;    // per buffer: the value it holds last
  // The fetches the plan issues early: each before the compute of its step.
  struct Fetch {
    int step;
    ir::ValueId value;
  };
  std::vector<Fetch> fetches_;
};

}  // namespace

RewriteSetup RewriteSetup::Of(const ir::Graph& graph, std::vector<ir::NodeId> schedule,
                              std::vector<int64_t> scratch_bytes) {
  RewriteSetup setup;
  setup.reads = ScheduleReads::Of(graph, schedule);
  setup.schedule = std::move(schedule);
  setup.scratch_bytes = std::move(scratch_bytes);
  setup.input_begin.push_back(0);
  setup.output_begin.push_back(0);
  for (const ir::NodeId id : setup.schedule) {
    const ir::Node& node = graph.node(id);
    setup.op.push_back(node.op);
    setup.inputs.insert(setup.inputs.end(), node.inputs.begin(), node.inputs.end());
    setup.outputs.insert(setup.outputs.end(), node.outputs.begin(), node.outputs.end());
    setup.input_begin.push_back(static_cast<int>(setup.inputs.size()));
    setup.output_begin.push_back(static_cast<int>(setup.outputs.size()));
  }
  setup.value_bytes.reserve(static_cast<size_t>(graph.num_values()));
  absl::flat_hash_map<ir::TensorType, int32_t> classes;
  for (const ir::Value& value : graph.values()) {
    const int32_t next = static_cast<int32_t>(classes.size());
    setup.type_class.push_back(classes.try_emplace(value.type, next).first->second);
    setup.value_bytes.push_back(value.type.bytes());
    setup.can_spill.push_back(CanSpill(graph, value.id));
    setup.can_spill_between_reads.push_back(CanSpillBetweenReads(graph, value.id));
    setup.can_recompute.push_back(CanRecompute(graph, value.id));
  }
  return setup;
}

absl::StatusOr<Program> Rewrite(const ir::Graph& graph, const RewriteSetup& setup,
                                const Plan& plan) {
  return Rewriter(graph, setup, plan).Run();
}

absl::StatusOr<Program> Rewrite(const ir::Graph& graph, std::vector<ir::NodeId> schedule,
                                const Plan& plan, std::vector<int64_t> scratch_bytes) {
  const RewriteSetup setup = RewriteSetup::Of(graph, std::move(schedule), std::move(scratch_bytes));
  return Rewrite(graph, setup, plan);
}

HeapLayout LayOut(const Program& program, HeapAlgorithm& heap,
                  std::span<const int> release_before) {
  // Buffers whose release is put off, in the order of the instruction they
  // are released before (then of their Free).
  auto put_off = [&](BufferId buffer) {
    const auto index = static_cast<size_t>(buffer);
    return index < release_before.size() && release_before[index] >= 0;
  };
  std::vector<std::pair<int, BufferId>> deferred;
  for (const Instruction& instruction : program.instructions) {
    if (instruction.kind == InstructionKind::kFree && put_off(instruction.buffer)) {
      deferred.emplace_back(release_before[static_cast<size_t>(instruction.buffer)],
                            instruction.buffer);
    }
  }
  std::stable_sort(deferred.begin(), deferred.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  auto next = deferred.begin();
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    for (; next != deferred.end() && next->first <= static_cast<int>(i); ++next) {
      heap.Free(next->second);
    }
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind == InstructionKind::kAlloc) {
      if (heap.gave_up()) break;  // nothing after changes the layout
      heap.Alloc(instruction.buffer, program.buffer(instruction.buffer).bytes);
    } else if (instruction.kind == InstructionKind::kFree && !put_off(instruction.buffer)) {
      heap.Free(instruction.buffer);
    }
  }
  for (; next != deferred.end(); ++next) heap.Free(next->second);
  return heap.Finish();
}

void AssignArena(Program& program, HeapAlgorithm& heap) {
  ApplyLayout(program, LayOut(program, heap));
}

void ApplyLayout(Program& program, const HeapLayout& layout) {
  SPILLWAY_CHECK(layout.complete, "applying a layout its algorithm gave up on");
  std::vector<int> free_index(program.buffers.size(), -1);
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    const Instruction& instruction = program.instructions[i];
    if (instruction.kind == InstructionKind::kFree) {
      free_index[static_cast<size_t>(instruction.buffer)] = static_cast<int>(i);
    }
  }
  // In Alloc order: a buffer allocated again keeps its latest placement.
  for (const auto& [buffer, offset] : layout.placements) {
    program.buffers[static_cast<size_t>(buffer)].offset = offset;
  }
  program.alignment = layout.alignment;
  // The arena ends at the highest byte a buffer uses: the layout rounds every
  // block up to its alignment, but nothing needs the padding after the last.
  program.arena_bytes = 0;
  for (const Buffer& buffer : program.buffers) {
    if (buffer.memory == Memory::kDevice && buffer.offset >= 0) {
      program.arena_bytes = std::max(program.arena_bytes, buffer.offset + buffer.bytes);
    }
  }
  // The kernels' workspace region goes on top, aligned like a buffer.
  program.workspace_offset = -1;
  if (program.workspace_bytes > 0) {
    program.workspace_offset =
        (program.arena_bytes + program.alignment - 1) / program.alignment * program.alignment;
    program.arena_bytes = program.workspace_offset + program.workspace_bytes;
  }

  // Which buffer last held each byte range, in program order: an alloc waits
  // on the frees of the buffers whose bytes it takes over. Earlier occupants
  // are ordered before those through their own successors' waits.
  struct Segment {
    int64_t end = 0;
    BufferId buffer = kNoBuffer;
  };
  // A B-tree: a candidate's layout is applied thousands of times a planning,
  // and a node per segment was a third of this function's time. Each alloc
  // finds its place with one search and changes the tree with at most one
  // range erase and two hinted inserts (inserting invalidates iterators, so
  // a segment it cuts is shortened before its tail goes in).
  absl::btree_map<int64_t, Segment> occupant;  // start -> segment
  std::vector<BufferId> previous;  // the buffers whose bytes an alloc takes over, once each
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    if (program.instructions[i].kind != InstructionKind::kAlloc) continue;
    const Buffer& buffer = program.buffer(program.instructions[i].buffer);
    if (buffer.bytes == 0) continue;
    const int64_t begin = buffer.offset;
    const int64_t end = buffer.offset + buffer.bytes;
    const Segment placed{end, buffer.id};
    previous.clear();
    // The segments that overlap [begin, end): perhaps one starting before
    // `begin`, whose head stays (and its tail past `end`, if it reaches
    // there, goes back in first), then those starting in [begin, end).
    auto first = occupant.upper_bound(begin);
    if (first != occupant.begin()) {
      const auto before = std::prev(first);
      if (before->second.end > begin) {
        if (before->first == begin) {
          first = before;  // covered from its start: it goes with the rest
        } else {
          previous.push_back(before->second.buffer);
          const Segment whole = before->second;
          before->second.end = begin;
          if (whole.end > end) first = occupant.emplace_hint(first, end, whole);
        }
      }
    }
    auto last = first;
    for (; last != occupant.end() && last->first < end; ++last) {
      previous.push_back(last->second.buffer);
    }
    // The last segment covered may reach past `end`: its tail stays.
    std::optional<Segment> tail;
    if (last != first && std::prev(last)->second.end > end) tail = std::prev(last)->second;
    const auto at = occupant.emplace_hint(occupant.erase(first, last), begin, placed);
    if (tail) occupant.emplace_hint(std::next(at), end, *tail);
    std::sort(previous.begin(), previous.end());
    previous.erase(std::unique(previous.begin(), previous.end()), previous.end());
    for (BufferId before : previous) {
      const int index = free_index[static_cast<size_t>(before)];
      SPILLWAY_CHECK(index >= 0 && index < static_cast<int>(i),
                     "arena bytes are reused only after their previous buffer is freed");
      Instruction& free = program.instructions[static_cast<size_t>(index)];
      Instruction& alloc = program.instructions[i];
      // Same stream and nothing to wait for: stream order already says it.
      if (free.stream == alloc.stream && free.waits.empty()) continue;
      if (free.record == kNoEvent) free.record = program.num_events++;
      alloc.waits.push_back(free.record);
    }
  }
}

absl::StatusOr<Program> BuildProgram(const ir::Graph& graph,
                                     const std::vector<ir::NodeId>& schedule, const Plan& plan,
                                     int64_t enough_bytes) {
  ASSIGN_OR_RETURN(Program program, Rewrite(graph, schedule, plan));
  LayOutArena(program, enough_bytes);
  return program;
}

void LayOutArena(Program& program, int64_t enough_bytes, std::span<const int> release_before,
                 int64_t useless_above) {
  auto lay_out = [&](bool largest_first, std::span<const int> releases,
                     int64_t give_up_above = std::numeric_limits<int64_t>::max()) {
    if (largest_first) {
      DecreasingSizeBestFitHeap heap(kArenaAlignment, give_up_above);
      return LayOut(program, heap, releases);
    }
    BestFitHeap heap(kArenaAlignment, give_up_above);
    return LayOut(program, heap, releases);
  };
  // Online best fit does well when lifetimes nest; largest-first when a few
  // huge tensors come and go among many small ones. Online best fit is the
  // cheaper, so it goes first; the later releases are kept wherever the
  // arena with them is at most `enough_bytes`.
  const HeapLayout online = lay_out(/*largest_first=*/false, {});
  if (online.arena_bytes <= enough_bytes) {
    if (!release_before.empty()) {
      // Kept only if it fits, so it may give up once it does not.
      HeapLayout later = lay_out(/*largest_first=*/false, release_before, enough_bytes);
      if (later.arena_bytes <= enough_bytes) return ApplyLayout(program, later);
    }
    return ApplyLayout(program, online);
  }
  if (!release_before.empty()) {
    // Kept only if it fits, so it may give up once it does not: most do not
    // (the releases lengthen lifetimes), and they find out early.
    HeapLayout later = lay_out(/*largest_first=*/true, release_before, enough_bytes);
    if (later.arena_bytes <= enough_bytes) return ApplyLayout(program, later);
  }
  // Nothing with the releases fits: the smaller arena without them. A
  // largest-first arena past `useless_above` by more than the alignment
  // cannot end as a Program arena at or below it (that rounds down by less),
  // so giving up there leaves the choice exact or both arenas useless.
  const int64_t give_up_above =
      useless_above > std::numeric_limits<int64_t>::max() - kArenaAlignment
          ? std::numeric_limits<int64_t>::max()
          : useless_above + kArenaAlignment;
  HeapLayout global = lay_out(/*largest_first=*/true, {}, give_up_above);
  ApplyLayout(program,
              global.complete && global.arena_bytes < online.arena_bytes ? global : online);
}

namespace {

// The most device bytes allocated at once, in program order, and the step of
// the first alloc that reaches it.
struct LivePeak {
  int64_t bytes = 0;
  int step = 0;
};

LivePeak FindLivePeak(const Program& program) {
  int64_t live = 0;
  LivePeak peak;
  bool any = false;
  // The same allocs and frees LayOut hands the heap (host buffers have none).
  for (const Instruction& instruction : program.instructions) {
    if (instruction.kind == InstructionKind::kAlloc) {
      live += program.buffer(instruction.buffer).bytes;
      if (!any || live > peak.bytes) {
        peak = {std::max<int64_t>(live, 0), instruction.step};
        any = true;
      }
    } else if (instruction.kind == InstructionKind::kFree) {
      live -= program.buffer(instruction.buffer).bytes;
    }
  }
  return peak;
}

}  // namespace

int64_t LiveBytesPeak(const Program& program) { return FindLivePeak(program).bytes; }

int LiveBytesPeakStep(const Program& program) { return FindLivePeak(program).step; }

}  // namespace spillway::program
