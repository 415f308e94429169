// The Program: the contract between planning and execution. An ordered list of
// instructions, each bound to one of three streams, synchronised by events,
// with every device buffer allocated and freed explicitly at an offset of one
// arena. The simulator (src/sim) times it; the runtime executes it. A Program
// that the verifier (program/verifier.h) accepts cannot read a buffer that is
// not resident and cannot use more device memory than its arena.
//
// Semantics:
// - Each stream runs its instructions in list order. An instruction starts
//   when its stream has finished the previous one and every event it waits on
//   has been recorded; it records its event, if any, when it finishes.
// - The list order is a valid order of the whole Program: an instruction only
//   waits on events recorded by instructions earlier in the list. That makes
//   the event graph acyclic by construction, and the verifier checks it.
// - kAlloc and kFree take no time. A free never holds up its stream: it takes
//   effect once its stream reaches it and its events have been recorded, and
//   the instructions after it on the stream do not wait for it. An alloc whose
//   arena range was used by an earlier buffer waits on that buffer's free.
// - Persistent buffers (parameters, optimizer state, batch-norm statistics,
//   the input batch) are allocated first and never freed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "ir/graph.h"

namespace spillway::program {

using BufferId = int32_t;
using EventId = int32_t;
inline constexpr BufferId kNoBuffer = -1;
inline constexpr EventId kNoEvent = -1;

// An instruction's buffers and events. Almost every instruction reads,
// writes and waits for at most four, so they sit inside the instruction
// (no larger than a std::vector): a planner builds thousands of Programs of
// thousands of instructions, and a heap allocation per list was most of the
// cost of building one.
using BufferIds = absl::InlinedVector<BufferId, 4>;
using EventIds = absl::InlinedVector<EventId, 4>;

enum class Stream : uint8_t { kCompute, kDeviceToHost, kHostToDevice };
inline constexpr int kNumStreams = 3;
std::string_view StreamName(Stream stream);  // "compute", "d2h", "h2d"

enum class Memory : uint8_t { kDevice, kHost };

// What a buffer holds of its value, which its name says after the value's.
enum class BufferRole : uint8_t {
  kValue,      // the value as produced (or a graph input): "conv1"
  kHost,       // its copy in host memory: "conv1@host"
  kFetch,      // that copy fetched back to the device: "conv1@fetch"
  kRecompute,  // the value rebuilt by recomputation: "conv1@recompute"
  // Memory one kernel needs only while it runs (a convolution's zero-padded
  // copy of its input, program/workspaces.h), allocated just before that
  // instruction and freed just after it; `value` is the node's first
  // output: "up4.up_conv@scratch".
  kScratch,
};

struct Buffer {
  BufferId id = 0;
  // Empty in the rewriter's Programs: BufferName derives the name from the
  // value and the role when one is wanted (building a string per buffer was
  // half the cost of a rewrite, which a planner runs for every candidate).
  // A Program made by hand may name its buffers here. Read names with
  // BufferName, never from here.
  std::string given_name;
  ir::ValueId value = ir::kInvalidValue;
  BufferRole role = BufferRole::kValue;
  int64_t bytes = 0;
  Memory memory = Memory::kDevice;
  bool persistent = false;  // allocated at the start and never freed
  int64_t offset = -1;      // device buffers: offset in the arena
};

enum class InstructionKind : uint8_t {
  kAlloc,         // `buffer` becomes resident (its contents undefined)
  kFree,          // `buffer` is released
  kCompute,       // runs `node`: reads `reads`, writes `writes`
  kRecompute,     // re-runs forward `node` to rebuild a freed value
  kCopyToHost,    // d2h: reads[0] (device) -> writes[0] (host)
  kCopyToDevice,  // h2d: reads[0] (host) -> writes[0] (device)
};
std::string_view InstructionKindName(InstructionKind kind);

struct Instruction {
  InstructionKind kind = InstructionKind::kCompute;
  Stream stream = Stream::kCompute;
  ir::NodeId node = ir::kNoNode;  // compute and recompute
  BufferId buffer = kNoBuffer;    // alloc and free
  // Compute: one entry per node input / output, in order (an output that is
  // not produced — an unused statistic of a recompute — is kNoBuffer). A
  // recomputed batch norm also reads its saved statistics, after its inputs,
  // and skips the running statistics (kNoBuffer): it normalizes with the
  // statistics of the first run and updates nothing.
  // An output may be written over a dead input's buffer (the op's registry
  // entry allows it): a buffer can hold several values, one after another.
  // Copies: the source and the destination.
  BufferIds reads;
  BufferIds writes;
  EventIds waits;
  EventId record = kNoEvent;
  int step = -1;  // the schedule step this instruction belongs to, for reports
  // Compute and recompute: the kernel's own scratch buffer (kScratch), where
  // the node declares one for the device; no other instruction reads or
  // writes it.
  BufferId scratch = kNoBuffer;
};

// When one instruction ran, in seconds from the start of the step: as the
// simulator predicts it (sim::SimulationResult::timings) or as a runtime
// measured it (runtime::StepResult::timeline).
struct InstructionTiming {
  double start_s = 0;
  double end_s = 0;
};

struct Program {
  const ir::Graph* graph = nullptr;  // the training graph; outlives the Program
  std::vector<ir::NodeId> schedule;  // the order the compute stream runs the graph in
  std::vector<Buffer> buffers;
  std::vector<Instruction> instructions;
  int num_events = 0;
  // The device arena: it ends at the highest byte of any device buffer, or
  // of the workspace region where there is one.
  int64_t arena_bytes = 0;
  // The kernels' workspace (program/workspaces.h): one region at the top of
  // the arena, above every buffer, handed to every kernel; 0 bytes (offset
  // -1) where the device's kernels need none from the Program. Set before
  // the layout, which places it.
  int64_t workspace_bytes = 0;
  int64_t workspace_offset = -1;
  // Every device buffer's offset is a multiple of it: the layout's alignment
  // (256 bytes, cudaMalloc's, which covers every backend's); the runtime
  // checks it against the backend's.
  int64_t alignment = 1;
  int64_t host_bytes = 0;  // the host pool for spilled tensors

  const Buffer& buffer(BufferId id) const { return buffers.at(static_cast<size_t>(id)); }
};

// A batch norm in training mode is recomputed from the statistics it saved
// the first time, so that the recomputed output is bitwise the original, and
// does not touch the running statistics again.
bool RecomputeReadsSavedStatistics(const ir::Node& node);

// The value the k-th read of a compute or recompute instruction holds: the
// node's k-th input; past its inputs, for a batch norm recomputed from its
// saved statistics, its outputs 1 (the mean) and 2 (the inverse standard
// deviation). The one place this order is written down: the verifier and the
// runtime read it here, and kernels get their inputs in it (backends/kernel.h).
ir::ValueId ReadValue(const ir::Graph& graph, const Instruction& instruction, size_t k);

// A readable listing, one instruction a line, for dumps and test failures.
// "conv1", "conv1@host", "conv1@fetch", "conv1@recompute": the buffer's own
// name where it has one, else its value's name (from the Program's graph)
// and its role's suffix.
std::string BufferName(const Program& program, const Buffer& buffer);
std::string BufferName(const Program& program, BufferId id);

std::string ProgramToText(const Program& program);

}  // namespace spillway::program
