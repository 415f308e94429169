#include "program/verifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "program/rewriter.h"
#include "program/test_graphs.h"
#include "program/workspaces.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

using testing::ChainText;
using ::testing::HasSubstr;
using testing::ParseOrDie;

// A Program of `graph_` that verifies, for each test to break one rule of.
class BreakingAProgram : public ::testing::Test {
 protected:
  explicit BreakingAProgram(ir::Graph graph) : graph_(std::move(graph)) {}

  void SetUp() override {
    absl::Status status = VerifyProgram(program_);
    ASSERT_TRUE(status.ok()) << StatusMessage(status) << "\n" << ProgramToText(program_);
  }

  std::string Error() const {
    absl::Status status = VerifyProgram(program_);
    EXPECT_FALSE(status.ok()) << ProgramToText(program_);
    return std::string(StatusMessage(status));
  }

  ir::Graph graph_;
  Program program_;
};

// The chain with a spilled: a goes out after step 0 and comes back before
// step 5.
class VerifierTest : public BreakingAProgram {
 protected:
  VerifierTest() : BreakingAProgram(ParseOrDie(ChainText("spill"))) {
    Plan plan("pinned", graph_);
    SPILLWAY_CHECK(ApplyPins(graph_, plan).ok());
    absl::StatusOr<Program> built = BuildProgram(graph_, TrainingSchedule(graph_), plan);
    SPILLWAY_CHECK(built.ok());
    program_ = *std::move(built);
  }

  size_t Find(InstructionKind kind, std::string_view name) const {
    for (size_t i = 0; i < program_.instructions.size(); ++i) {
      const Instruction& instruction = program_.instructions[i];
      if (instruction.kind != kind) continue;
      const bool by_node =
          instruction.node != ir::kNoNode && graph_.node(instruction.node).name == name;
      const bool by_buffer =
          (instruction.buffer != kNoBuffer && BufferName(program_, instruction.buffer) == name) ||
          (!instruction.writes.empty() && instruction.writes[0] != kNoBuffer &&
           BufferName(program_, instruction.writes[0]) == name);
      if (by_node || by_buffer) return i;
    }
    ADD_FAILURE() << "no " << InstructionKindName(kind) << " of " << name;
    return 0;
  }

  Instruction& At(InstructionKind kind, std::string_view name) {
    return program_.instructions[Find(kind, name)];
  }

  BufferId BufferNamed(std::string_view name) const {
    for (const Buffer& buffer : program_.buffers) {
      if (BufferName(program_, buffer) == name) return buffer.id;
    }
    ADD_FAILURE() << "no buffer " << name;
    return kNoBuffer;
  }
};

TEST_F(VerifierTest, ReadingAFetchWithoutWaitingForIt) {
  // dw waits for the fetch's alloc but not for its copy.
  Instruction& alloc = At(InstructionKind::kAlloc, "a@fetch");
  alloc.record = program_.num_events++;
  At(InstructionKind::kCompute, "dw").waits = {alloc.record};
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'a@fetch' before any write of it has completed"));
}

TEST_F(VerifierTest, ReadingAFetchBeforeItsAlloc) {
  At(InstructionKind::kCompute, "dw").waits.clear();
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'a@fetch' before it is allocated"));
}

TEST_F(VerifierTest, FetchingBeforeTheSpillHasLanded) {
  // The alloc waits for a free that waits for the spill: clear both.
  At(InstructionKind::kAlloc, "a@fetch").waits.clear();
  At(InstructionKind::kCopyToDevice, "a@fetch").waits.clear();
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'a@host' before any write"));
}

TEST_F(VerifierTest, ReadingABufferAfterItsFree) {
  // Move the free of b in front of da, which still reads b.
  const size_t free = Find(InstructionKind::kFree, "b");
  Instruction moved = program_.instructions[free];
  program_.instructions.erase(program_.instructions.begin() + static_cast<std::ptrdiff_t>(free));
  program_.instructions.insert(
      program_.instructions.begin() +
          static_cast<std::ptrdiff_t>(Find(InstructionKind::kCompute, "da")),
      moved);
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'b' after it may have been freed"));
}

TEST_F(VerifierTest, FreeingBeforeTheSpillCopyIsDone) {
  At(InstructionKind::kFree, "a").waits.clear();
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'a' after it may have been freed"));
}

TEST_F(VerifierTest, ReadingBeforeTheAlloc) {
  const size_t alloc = Find(InstructionKind::kAlloc, "c");
  Instruction moved = program_.instructions[alloc];
  program_.instructions.erase(program_.instructions.begin() + static_cast<std::ptrdiff_t>(alloc));
  program_.instructions.insert(
      program_.instructions.begin() +
          static_cast<std::ptrdiff_t>(Find(InstructionKind::kCompute, "c") + 1),
      moved);
  EXPECT_THAT(Error(), HasSubstr("writes buffer 'c' before it is allocated"));
}

TEST_F(VerifierTest, TwoLiveBuffersSharingBytes) {
  // b and c are both live while c is computed.
  program_.buffers[static_cast<size_t>(BufferNamed("c"))].offset =
      program_.buffer(BufferNamed("b")).offset;
  EXPECT_THAT(Error(), HasSubstr("share arena bytes while both may be live"));
}

TEST_F(VerifierTest, ReusingBytesWithoutWaitingForTheFree) {
  // c takes a's bytes, freed once a's spill copy is done: c's alloc must wait.
  ASSERT_EQ(program_.buffer(BufferNamed("c")).offset, program_.buffer(BufferNamed("a")).offset);
  Instruction& alloc = At(InstructionKind::kAlloc, "c");
  ASSERT_FALSE(alloc.waits.empty());
  alloc.waits.clear();
  EXPECT_THAT(Error(), HasSubstr("share arena bytes while both may be live"));
}

TEST_F(VerifierTest, BufferOutsideTheArena) {
  program_.buffers[static_cast<size_t>(BufferNamed("b"))].offset = program_.arena_bytes;
  EXPECT_THAT(Error(), HasSubstr("lies outside the"));
}

// The kernels' workspace region sits above every buffer: a buffer moved into
// it, or a region that does not fit the arena, is refused.
TEST_F(VerifierTest, BufferInTheKernelsWorkspace) {
  program_.workspace_bytes = 4096;
  program_.workspace_offset = (program_.arena_bytes + 255) / 256 * 256;
  program_.arena_bytes = program_.workspace_offset + 4096;
  ASSERT_TRUE(VerifyProgram(program_).ok());
  Buffer& b = program_.buffers[static_cast<size_t>(BufferNamed("b"))];
  b.offset = program_.workspace_offset;
  EXPECT_THAT(Error(), HasSubstr("reaches into the kernels' workspace"));
}

TEST_F(VerifierTest, WorkspaceOutsideTheArena) {
  program_.workspace_bytes = 512;
  program_.workspace_offset = (program_.arena_bytes + 255) / 256 * 256;
  EXPECT_THAT(Error(), HasSubstr("is not an aligned region of the"));
}

TEST_F(VerifierTest, BufferOffTheAlignment) {
  ASSERT_EQ(program_.alignment, 256);
  program_.arena_bytes += 256;
  program_.buffers[static_cast<size_t>(BufferNamed("b"))].offset += 64;
  EXPECT_THAT(Error(), HasSubstr("not a multiple of the 256-byte alignment"));
}

TEST_F(VerifierTest, AGraphOutputFreedBeforeTheStepEnds) {
  // dw, the output, stays in its buffer after the step; a free loses it.
  Instruction free;
  free.kind = InstructionKind::kFree;
  free.buffer = At(InstructionKind::kCompute, "dw").writes[0];
  program_.instructions.push_back(free);
  EXPECT_THAT(Error(), HasSubstr("graph output 'dw' does not survive the step"));
}

TEST_F(VerifierTest, WaitingOnAnEventRecordedLater) {
  // c's compute waits on the fetch, which is recorded only in the backward pass.
  At(InstructionKind::kCompute, "c")
      .waits.push_back(At(InstructionKind::kCopyToDevice, "a@fetch").record);
  EXPECT_THAT(Error(), HasSubstr("before any instruction records it: the order has a cycle"));
}

TEST_F(VerifierTest, EventRecordedTwice) {
  At(InstructionKind::kCompute, "c").record = At(InstructionKind::kCopyToHost, "a@host").record;
  EXPECT_THAT(Error(), HasSubstr("is recorded twice"));
}

TEST_F(VerifierTest, BufferNeverFreed) {
  const size_t free = Find(InstructionKind::kFree, "a@fetch");
  program_.instructions.erase(program_.instructions.begin() + static_cast<std::ptrdiff_t>(free));
  EXPECT_THAT(Error(), HasSubstr("buffer 'a@fetch' is never freed"));
}

TEST_F(VerifierTest, BufferFreedTwice) {
  program_.instructions.push_back(program_.instructions[Find(InstructionKind::kFree, "a@fetch")]);
  EXPECT_THAT(Error(), HasSubstr("buffer 'a@fetch' is freed twice"));
}

TEST_F(VerifierTest, NodeComputedTwice) {
  program_.instructions.push_back(program_.instructions[Find(InstructionKind::kCompute, "dw")]);
  EXPECT_THAT(Error(), HasSubstr("node 'dw' is computed 2 times"));
}

TEST_F(VerifierTest, KernelOnACopyStream) {
  At(InstructionKind::kCompute, "b").stream = Stream::kHostToDevice;
  EXPECT_THAT(Error(), HasSubstr("runs a kernel off the compute stream"));
}

TEST_F(VerifierTest, CopyOnTheWrongStream) {
  At(InstructionKind::kCopyToHost, "a@host").stream = Stream::kHostToDevice;
  EXPECT_THAT(Error(), HasSubstr("is on the wrong copy stream"));
}

TEST_F(VerifierTest, OverwritingAValueThatIsStillNeeded) {
  // c written over b (and read from there by db), but da reads b at step 4.
  At(InstructionKind::kCompute, "c").writes[0] = BufferNamed("b");
  At(InstructionKind::kCompute, "db").reads = {BufferNamed("b"), BufferNamed("b")};
  EXPECT_THAT(Error(), HasSubstr("reads buffer 'b' for 'b', but it holds 'c'"));
}

TEST_F(VerifierTest, OverwritingABufferASpillIsStillCopying) {
  // b written over a while a's copy to the host may still be running.
  At(InstructionKind::kCompute, "b").writes[0] = BufferNamed("a");
  EXPECT_THAT(Error(), HasSubstr("overwrites buffer 'a' while instruction"));
}

// A convolution padded on one side only runs on a padded copy of x on the
// GPU: its instruction has a scratch buffer of its own, allocated just
// before it and freed just after. Each test breaks one rule about it.
class ScratchTest : public BreakingAProgram {
 protected:
  ScratchTest()
      : BreakingAProgram(ParseOrDie("graph g {\n"
                                    "  input %x: f32[1,5,5,3] nhwc\n"
                                    "  param %w: f32[4,2,2,3]\n"
                                    "  %y: f32[1,5,5,4] nhwc = conv2d(%x, %w) {pads=[0,0,1,1]}\n"
                                    "  %z: f32[1,5,5,4] nhwc = conv2d(%x, %w) {pads=[0,0,1,1]}\n"
                                    "  %r: f32[1,5,5,4] nhwc = add(%y, %z)\n"
                                    "  output %r\n"
                                    "}\n")) {
    const std::vector<int64_t> scratch = ScratchBytesByNode(graph_, int64_t{64} << 20);
    absl::StatusOr<Program> built =
        Rewrite(graph_, TrainingSchedule(graph_), Plan("keep", graph_), scratch);
    SPILLWAY_CHECK(built.ok());
    program_ = *std::move(built);
    LayOutArena(program_);
  }

  // The index of the instruction that runs node `name`.
  size_t Kernel(std::string_view name) const {
    for (size_t i = 0; i < program_.instructions.size(); ++i) {
      const Instruction& instruction = program_.instructions[i];
      if (instruction.node != ir::kNoNode && graph_.node(instruction.node).name == name) return i;
    }
    ADD_FAILURE() << "no kernel of " << name;
    return 0;
  }
};

TEST_F(ScratchTest, TheRewriterAllocatesItJustAroundItsKernel) {
  for (const char* name : {"y", "z"}) {
    const size_t kernel = Kernel(name);
    const BufferId scratch = program_.instructions[kernel].scratch;
    ASSERT_NE(scratch, kNoBuffer) << name;
    const Buffer& buffer = program_.buffer(scratch);
    EXPECT_EQ(buffer.role, BufferRole::kScratch);
    EXPECT_EQ(BufferName(program_, buffer), std::string(name) + "@scratch");
    EXPECT_EQ(buffer.bytes, 6 * 6 * 3 * 4);  // x with a row and a column of zeros more
    const Instruction& alloc = program_.instructions[kernel - 1];
    const Instruction& free = program_.instructions[kernel + 1];
    EXPECT_EQ(alloc.kind, InstructionKind::kAlloc);
    EXPECT_EQ(alloc.buffer, scratch);
    EXPECT_EQ(free.kind, InstructionKind::kFree);
    EXPECT_EQ(free.buffer, scratch);
  }
  EXPECT_EQ(program_.instructions[Kernel("r")].scratch, kNoBuffer);
}

TEST_F(ScratchTest, UsedAfterItsFree) {
  const size_t kernel = Kernel("y");
  std::swap(program_.instructions[kernel], program_.instructions[kernel + 1]);
  EXPECT_THAT(Error(),
              HasSubstr("uses as scratch buffer 'y@scratch' after it may have been freed"));
}

TEST_F(ScratchTest, ReadByAnotherKernel) {
  program_.instructions[Kernel("r")].reads[0] = program_.instructions[Kernel("y")].scratch;
  EXPECT_THAT(Error(),
              HasSubstr("reads or writes buffer 'y@scratch', which is a kernel's scratch"));
}

TEST_F(ScratchTest, SharedByTwoKernels) {
  program_.instructions[Kernel("r")].scratch = program_.instructions[Kernel("y")].scratch;
  EXPECT_THAT(Error(), HasSubstr("is the scratch of 2 kernels, not one"));
}

TEST_F(ScratchTest, NotAScratchBuffer) {
  program_.instructions[Kernel("z")].scratch = program_.instructions[Kernel("y")].writes[0];
  EXPECT_THAT(Error(), HasSubstr("takes buffer 'y' as scratch, which is not a scratch"));
}

TEST_F(ScratchTest, OnAnInstructionThatRunsNoKernel) {
  const BufferId scratch = program_.instructions[Kernel("y")].scratch;
  program_.instructions[Kernel("y") - 1].scratch = scratch;
  EXPECT_THAT(Error(), HasSubstr("has a scratch buffer but runs no kernel"));
}

}  // namespace
}  // namespace spillway::program
