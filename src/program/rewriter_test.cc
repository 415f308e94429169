#include "program/rewriter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "autodiff/saved_tensors.h"
#include "autodiff/training_graph.h"
#include "ir/builder.h"
#include "models/models.h"
#include "program/test_graphs.h"
#include "program/verifier.h"
#include "support/status_macros.h"

namespace spillway::program {
namespace {

using testing::ChainText;
using testing::ComputeOf;
using ::testing::HasSubstr;
using testing::IndicesOf;
using testing::kKiB;
using testing::ParseOrDie;
using testing::TrainingModel;

Plan PinnedPlan(const ir::Graph& graph) {
  Plan plan("pinned", graph);
  absl::Status pinned = ApplyPins(graph, plan);
  EXPECT_TRUE(pinned.ok()) << StatusMessage(pinned);
  return plan;
}

Program BuildVerified(const ir::Graph& graph, const Plan& plan) {
  absl::StatusOr<Program> program = BuildProgram(graph, TrainingSchedule(graph), plan);
  EXPECT_TRUE(program.ok()) << StatusMessage(program.status());
  if (!program.ok()) return Program{};
  absl::Status verified = VerifyProgram(*program);
  EXPECT_TRUE(verified.ok()) << StatusMessage(verified) << "\n" << ProgramToText(*program);
  return *std::move(program);
}

TEST(Rewriter, KeepingEverythingNeedsThePeakOfTheNaiveSchedule) {
  const ir::Graph graph = ParseOrDie(ChainText());
  const Program program = BuildVerified(graph, Plan("none", graph));
  // w is persistent; a, b and c are all alive when db is made at step 3:
  // w + a + b + c = 4 KiB. Each gradient is written over the buffer of the
  // tensor it reads last (db over c, da over db, dw over da): no new bytes.
  EXPECT_EQ(program.arena_bytes, 4 * kKiB);
  EXPECT_EQ(program.buffers.size(), 4u);
  EXPECT_EQ(program.host_bytes, 0);
  EXPECT_TRUE(IndicesOf(program, InstructionKind::kCopyToHost).empty());
  EXPECT_TRUE(IndicesOf(program, InstructionKind::kRecompute).empty());
  EXPECT_EQ(IndicesOf(program, InstructionKind::kCompute).size(), 6u);
  // Every buffer but w (persistent) and c's (which ends holding dw, the
  // output) is freed.
  EXPECT_EQ(IndicesOf(program, InstructionKind::kFree).size(), program.buffers.size() - 2);
}

TEST(Rewriter, SpillingCopiesOutAfterTheProducerAndBackJustInTime) {
  const ir::Graph graph = ParseOrDie(ChainText("spill"));
  const Program program = BuildVerified(graph, PinnedPlan(graph));
  // a leaves the device after b reads it at step 1 (b cannot be written over
  // a while the copy reads it), so at most w + a + b, w + b + c and at step
  // 5 w + da + a@fetch (dw over da) are resident: 3 KiB.
  EXPECT_EQ(program.arena_bytes, 3 * kKiB);
  EXPECT_EQ(program.host_bytes, 1 * kKiB);
  const std::vector<size_t> out = IndicesOf(program, InstructionKind::kCopyToHost);
  const std::vector<size_t> in = IndicesOf(program, InstructionKind::kCopyToDevice);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_GT(out[0], ComputeOf(program, "a"));
  EXPECT_LT(out[0], ComputeOf(program, "b"));
  EXPECT_GT(in[0], ComputeOf(program, "da"));
  EXPECT_LT(in[0], ComputeOf(program, "dw"));
  // dw reads the fetched copy and waits for it.
  const Instruction& dw = program.instructions[ComputeOf(program, "dw")];
  EXPECT_EQ(BufferName(program, dw.reads[1]), "a@fetch");
  EXPECT_THAT(dw.waits, ::testing::Contains(program.instructions[in[0]].record));
}

TEST(Rewriter, AReleasePutOffKeepsItsBytesFromTheBuffersAllocatedBeforeIt) {
  const ir::Graph graph = ParseOrDie(ChainText("spill"));
  absl::StatusOr<Program> rewritten = Rewrite(graph, TrainingSchedule(graph), PinnedPlan(graph));
  ASSERT_TRUE(rewritten.ok()) << StatusMessage(rewritten.status());
  const std::vector<size_t> out = IndicesOf(*rewritten, InstructionKind::kCopyToHost);
  ASSERT_EQ(out.size(), 1u);
  const BufferId a = rewritten->instructions[out[0]].reads[0];
  std::vector<int> release(rewritten->buffers.size(), -1);
  release[static_cast<size_t>(a)] = static_cast<int>(ComputeOf(*rewritten, "db"));

  // Released at its Free, a's bytes go to c (3 KiB, as above); held until db,
  // c, allocated before db, needs bytes of its own.
  Program plain = *rewritten;
  LayOutArena(plain, 4 * kKiB);
  Program later = *rewritten;
  LayOutArena(later, 4 * kKiB, release);
  EXPECT_EQ(plain.arena_bytes, 3 * kKiB);
  EXPECT_EQ(later.arena_bytes, 4 * kKiB);
  for (const Program* program : {&plain, &later}) {
    absl::Status verified = VerifyProgram(*program);
    EXPECT_TRUE(verified.ok()) << StatusMessage(verified) << "\n" << ProgramToText(*program);
  }
  // Where holding the bytes does not fit, the arena releases at the Free.
  Program tight = *rewritten;
  LayOutArena(tight, 3 * kKiB, release);
  EXPECT_EQ(tight.arena_bytes, 3 * kKiB);
  // And where the Program does not fit even so, it keeps the smaller arena,
  // laid out without them (4 KiB would be no worse a miss here).
  Program too_small = *rewritten;
  LayOutArena(too_small, 2 * kKiB, release);
  EXPECT_EQ(too_small.arena_bytes, 3 * kKiB);
}

// A limit past which the caller has no use for the arena changes nothing a
// caller can see: the Program's arena is the one it gets without the limit,
// or both are past the limit. Swept over plans (everything kept, every other
// saved tensor spilled, all recomputed), the budgets that send the layout
// down each of its paths, and limits around the arenas it reaches.
TEST(Rewriter, AnArenaPastAUselessLimitIsTheSameOrUselessToo) {
  const autodiff::TrainingGraph training = TrainingModel("resnet18", 32);
  const ir::Graph& graph = training.graph;
  const std::vector<autodiff::SavedTensor> saved = autodiff::SavedTensors(graph);
  std::vector<Plan> plans(3, Plan("sweep", graph));
  for (size_t i = 0; i < saved.size(); ++i) {
    if (i % 2 == 0 && CanSpill(graph, saved[i].value)) plans[1].Spill(saved[i].value);
    if (CanRecompute(graph, saved[i].value)) plans[2].Recompute(saved[i].value);
  }
  int gave_up = 0;
  for (const Plan& plan : plans) {
    absl::StatusOr<Program> rewritten = Rewrite(graph, TrainingSchedule(graph), plan);
    ASSERT_TRUE(rewritten.ok()) << StatusMessage(rewritten.status());
    const int64_t peak = LiveBytesPeak(*rewritten);
    for (const double enough : {0.0, 0.9, 1.0, 1.1}) {
      const auto enough_bytes = static_cast<int64_t>(enough * static_cast<double>(peak));
      Program unlimited = *rewritten;
      LayOutArena(unlimited, enough_bytes);
      for (const double useless : {0.0, 0.5, 0.99, 1.0, 1.01, 2.0}) {
        const auto useless_above =
            static_cast<int64_t>(useless * static_cast<double>(unlimited.arena_bytes));
        SCOPED_TRACE(::testing::Message()
                     << plan.Count(Decision::kSpill) << " spilled, " << enough_bytes << " enough, "
                     << useless_above << " useless above");
        Program limited = *rewritten;
        LayOutArena(limited, enough_bytes, {}, useless_above);
        if (limited.arena_bytes != unlimited.arena_bytes) {
          ++gave_up;
          EXPECT_GT(limited.arena_bytes, useless_above);
          EXPECT_GT(unlimited.arena_bytes, useless_above);
        }
        const absl::Status verified = VerifyProgram(limited);
        EXPECT_TRUE(verified.ok()) << StatusMessage(verified);
      }
    }
  }
  // The limit did cut some layouts short (the sweep reaches that path).
  EXPECT_GT(gave_up, 0);
}

// Applying a layout makes each alloc wait on the free of every buffer that
// last held one of its bytes: checked against painting the arena byte block
// by byte block, on random lifetimes laid out by both strategies (largest-
// first cuts earlier buffers' ranges in every way: inside one, across
// several, flush with either end).
TEST(Rewriter, ApplyingALayoutWaitsOnEveryBufferThatLastHeldTheBytes) {
  std::mt19937 random(20261207);
  for (int trial = 0; trial < 40; ++trial) {
    Program program;
    std::uniform_int_distribution<int> blocks(1, 8);
    const int count = 60;
    for (int b = 0; b < count; ++b) {
      Buffer& buffer = program.buffers.emplace_back();
      buffer.id = b;
      buffer.bytes = blocks(random) * kArenaAlignment;
    }
    // Allocs in id order on the compute stream; each buffer is freed, on
    // the d2h stream (so every reuse needs an event), some allocs later.
    std::vector<std::vector<BufferId>> freed_after(static_cast<size_t>(count));
    std::uniform_int_distribution<int> lifetime(0, 6);
    for (int b = 0; b < count; ++b) {
      freed_after[static_cast<size_t>(std::min(count - 1, b + lifetime(random)))].push_back(b);
    }
    for (int b = 0; b < count; ++b) {
      Instruction& alloc = program.instructions.emplace_back();
      alloc.kind = InstructionKind::kAlloc;
      alloc.buffer = b;
      for (BufferId dead : freed_after[static_cast<size_t>(b)]) {
        Instruction& free = program.instructions.emplace_back();
        free.kind = InstructionKind::kFree;
        free.stream = Stream::kDeviceToHost;
        free.buffer = dead;
      }
    }
    for (const bool largest_first : {false, true}) {
      Program laid_out = program;
      BestFitHeap online;
      DecreasingSizeBestFitHeap global;
      HeapAlgorithm& heap = largest_first ? static_cast<HeapAlgorithm&>(global) : online;
      ApplyLayout(laid_out, LayOut(laid_out, heap));
      // The buffer each free's event stands for.
      std::vector<BufferId> freed_by_event(static_cast<size_t>(laid_out.num_events), kNoBuffer);
      for (const Instruction& instruction : laid_out.instructions) {
        if (instruction.kind == InstructionKind::kFree && instruction.record != kNoEvent)
          freed_by_event[static_cast<size_t>(instruction.record)] = instruction.buffer;
      }
      std::vector<BufferId> holder(static_cast<size_t>(laid_out.arena_bytes / kArenaAlignment),
                                   kNoBuffer);
      for (const Instruction& instruction : laid_out.instructions) {
        if (instruction.kind != InstructionKind::kAlloc) continue;
        const Buffer& buffer = laid_out.buffer(instruction.buffer);
        std::vector<BufferId> expected;
        for (int64_t block = buffer.offset / kArenaAlignment;
             block < (buffer.offset + buffer.bytes) / kArenaAlignment; ++block) {
          BufferId& last = holder[static_cast<size_t>(block)];
          if (last != kNoBuffer) expected.push_back(last);
          last = buffer.id;
        }
        std::sort(expected.begin(), expected.end());
        expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
        std::vector<BufferId> waited;
        for (EventId event : instruction.waits) {
          waited.push_back(freed_by_event[static_cast<size_t>(event)]);
        }
        SCOPED_TRACE(::testing::Message() << "trial " << trial << ", buffer " << buffer.id
                                          << (largest_first ? ", largest first" : ", online"));
        EXPECT_EQ(waited, expected);
      }
    }
  }
}

TEST(RewriterDeathTest, ALayoutItsAlgorithmGaveUpOnIsNeverApplied) {
  const ir::Graph graph = ParseOrDie(ChainText("spill"));
  absl::StatusOr<Program> rewritten = Rewrite(graph, TrainingSchedule(graph), PinnedPlan(graph));
  ASSERT_TRUE(rewritten.ok()) << StatusMessage(rewritten.status());
  DecreasingSizeBestFitHeap heap(kArenaAlignment, /*give_up_above=*/0);
  const HeapLayout layout = LayOut(*rewritten, heap);
  ASSERT_FALSE(layout.complete);
  EXPECT_DEATH(ApplyLayout(*rewritten, layout), "gave up");
}

TEST(Rewriter, AFetchStepIssuesTheCopyEarlier) {
  const ir::Graph graph = ParseOrDie(ChainText());
  Plan plan("manual", graph);
  plan.Spill(*graph.FindValue("a"), /*fetch_step=*/3);
  const Program program = BuildVerified(graph, plan);
  const std::vector<size_t> in = IndicesOf(program, InstructionKind::kCopyToDevice);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(program.instructions[in[0]].step, 3);
  EXPECT_LT(in[0], ComputeOf(program, "db"));
  // Fetched before db is made, a@fetch joins w + b + c (db over c) at step
  // 3: the early fetch costs back the KiB the spill saved.
  EXPECT_EQ(program.arena_bytes, 4 * kKiB);
}

TEST(Rewriter, AFetchStepInsideTheForwardPassIsMovedAfterTheLastForwardRead) {
  const ir::Graph graph = ParseOrDie(ChainText());
  Plan plan("manual", graph);
  plan.Spill(*graph.FindValue("a"), /*fetch_step=*/0);
  const Program program = BuildVerified(graph, plan);
  const std::vector<size_t> in = IndicesOf(program, InstructionKind::kCopyToDevice);
  ASSERT_EQ(in.size(), 1u);
  // b reads a at step 1, so the earliest fetch is before step 2.
  EXPECT_EQ(program.instructions[in[0]].step, 2);
}

// a is read by db and again by dw, with x made in between.
constexpr char kRereadText[] =
    "graph reread {\n"
    "  param %w: f32[256]\n"
    "  %a: f32[256] = relu(%w)\n"
    "  %b: f32[256] = relu(%a)\n"
    "  %db: f32[256] = relu_backward(%b, %a) @backward\n"
    "  %x: f32[256] = relu_backward(%db, %b) @backward\n"
    "  %dw: f32[256] = relu_backward(%x, %a) @backward\n"
    "  output %dw\n"
    "}\n";

TEST(Rewriter, ASpilledTensorDroppedBetweenReadsIsFetchedAgain) {
  const ir::Graph graph = ParseOrDie(kRereadText);
  const ir::ValueId a = *graph.FindValue("a");
  Plan once("manual", graph);
  once.Spill(a);
  Plan twice("manual", graph);
  twice.Spill(a, /*fetch_step=*/-1, /*refetch_after=*/2);  // db, at step 2
  const Program fetched_once = BuildVerified(graph, once);
  const Program fetched_twice = BuildVerified(graph, twice);

  ASSERT_EQ(IndicesOf(fetched_once, InstructionKind::kCopyToDevice).size(), 1u);
  const std::vector<size_t> in = IndicesOf(fetched_twice, InstructionKind::kCopyToDevice);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(IndicesOf(fetched_twice, InstructionKind::kCopyToHost).size(), 1u);
  EXPECT_LT(in[0], ComputeOf(fetched_twice, "db"));
  EXPECT_GT(in[1], ComputeOf(fetched_twice, "x"));
  EXPECT_LT(in[1], ComputeOf(fetched_twice, "dw"));
  // Each reader reads its own copy, the one fetched for it.
  const BufferId first = fetched_twice.instructions[in[0]].writes[0];
  const BufferId second = fetched_twice.instructions[in[1]].writes[0];
  EXPECT_NE(first, second);
  EXPECT_EQ(fetched_twice.instructions[ComputeOf(fetched_twice, "db")].reads[1], first);
  EXPECT_EQ(fetched_twice.instructions[ComputeOf(fetched_twice, "dw")].reads[1], second);
  // Without the second fetch a@fetch waits beside b, db and x (x over db) at
  // step 3: w + b + x + a@fetch = 4 KiB. Dropped after db, it leaves 3 KiB.
  EXPECT_EQ(fetched_once.arena_bytes, 4 * kKiB);
  EXPECT_EQ(fetched_twice.arena_bytes, 3 * kKiB);
}

TEST(Rewriter, AForwardTensorDroppedBetweenForwardReadsIsSpilledAndFetchedBack) {
  // a waits for the last add while b, c and e are made: a branch's result
  // waiting for the other branch.
  const ir::Graph graph = ParseOrDie(
      "graph branches {\n"
      "  param %w: f32[256]\n"
      "  %a: f32[256] = relu(%w)\n"
      "  %b: f32[256] = relu(%a)\n"
      "  %c: f32[256] = relu(%b)\n"
      "  %e: f32[256] = add(%c, %b)\n"
      "  %d: f32[256] = add(%e, %a)\n"
      "  output %d\n"
      "}\n");
  Plan plan("manual", graph);
  plan.Spill(*graph.FindValue("a"), /*fetch_step=*/-1, /*refetch_after=*/1);  // b, at step 1
  const Program kept = BuildVerified(graph, Plan("none", graph));
  const Program dropped = BuildVerified(graph, plan);
  const std::vector<size_t> out = IndicesOf(dropped, InstructionKind::kCopyToHost);
  const std::vector<size_t> in = IndicesOf(dropped, InstructionKind::kCopyToDevice);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_LT(out[0], ComputeOf(dropped, "b"));
  EXPECT_GT(in[0], ComputeOf(dropped, "e"));
  EXPECT_LT(in[0], ComputeOf(dropped, "d"));
  // Kept, a is resident beside b and c at step 2: w + a + b + c. Dropped, it
  // is on the host then, and comes back beside w and e alone.
  EXPECT_EQ(kept.arena_bytes, 4 * kKiB);
  EXPECT_EQ(dropped.arena_bytes, 3 * kKiB);
}

TEST(Rewriter, AGradientSpilledBetweenReadsIsCopiedOutDroppedAndFetchedBack) {
  // g, a gradient, is read by b and again by the last add, with c and e made
  // in between: a residual's gradient waiting for the block's input gradient.
  const ir::Graph graph = ParseOrDie(
      "graph residual_gradient {\n"
      "  param %w: f32[256]\n"
      "  %a: f32[256] = relu(%w)\n"
      "  %g: f32[256] = relu_backward(%a, %a) @backward\n"
      "  %b: f32[256] = relu_backward(%g, %g) @backward\n"
      "  %c: f32[256] = relu_backward(%b, %b) @backward\n"
      "  %e: f32[256] = add(%c, %b) @backward\n"
      "  %d: f32[256] = add(%e, %g) @backward\n"
      "  output %d\n"
      "}\n");
  const ir::ValueId g = *graph.FindValue("g");
  EXPECT_FALSE(CanSpill(graph, g));
  EXPECT_TRUE(CanSpillBetweenReads(graph, g));
  EXPECT_FALSE(CanSpillBetweenReads(graph, *graph.FindValue("d")));  // the step's result
  Plan plan("manual", graph);
  plan.Spill(g, /*fetch_step=*/-1, /*refetch_after=*/2);  // b, at step 2
  const Program kept = BuildVerified(graph, Plan("none", graph));
  const Program dropped = BuildVerified(graph, plan);
  const std::vector<size_t> out = IndicesOf(dropped, InstructionKind::kCopyToHost);
  const std::vector<size_t> in = IndicesOf(dropped, InstructionKind::kCopyToDevice);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_GT(out[0], ComputeOf(dropped, "g"));
  EXPECT_LT(out[0], ComputeOf(dropped, "b"));
  EXPECT_GT(in[0], ComputeOf(dropped, "e"));
  EXPECT_LT(in[0], ComputeOf(dropped, "d"));
  // b reads the original; the last add reads the copy fetched for it.
  EXPECT_EQ(dropped.instructions[ComputeOf(dropped, "b")].reads[0],
            dropped.instructions[ComputeOf(dropped, "g")].writes[0]);
  EXPECT_EQ(dropped.instructions[ComputeOf(dropped, "d")].reads[1],
            dropped.instructions[in[0]].writes[0]);
  // Kept, g waits beside b and c at step 3: w + g + b + c. Dropped, it is on
  // the host then, and comes back beside w and e alone.
  EXPECT_EQ(kept.arena_bytes, 4 * kKiB);
  EXPECT_EQ(dropped.arena_bytes, 3 * kKiB);

  // A gradient has no copy for the backward pass to fetch unless the plan
  // drops it between reads.
  Plan whole("manual", graph);
  whole.Spill(g);
  EXPECT_THAT(StatusMessage(BuildProgram(graph, TrainingSchedule(graph), whole).status()),
              HasSubstr("the plan spills 'g', which is neither a forward activation nor a "
                        "gradient spilled between reads"));
}

TEST(Rewriter, RecomputingRerunsTheProducerBeforeTheFirstBackwardRead) {
  const ir::Graph graph = ParseOrDie(ChainText("", "recompute"));
  const Program program = BuildVerified(graph, PinnedPlan(graph));
  const std::vector<size_t> recomputes = IndicesOf(program, InstructionKind::kRecompute);
  ASSERT_EQ(recomputes.size(), 1u);
  const Instruction& recompute = program.instructions[recomputes[0]];
  EXPECT_EQ(program.graph->node(recompute.node).name, "b");
  EXPECT_EQ(BufferName(program, recompute.reads[0]), "a");
  EXPECT_GT(recomputes[0], ComputeOf(program, "db"));
  EXPECT_LT(recomputes[0], ComputeOf(program, "da"));
  EXPECT_EQ(BufferName(program, program.instructions[ComputeOf(program, "da")].reads[1]),
            "b@recompute");
  // c is written over b, which it reads last (step 2), and db over c; at
  // step 4 w + a + db + b@recompute are resident (da over db): 4 KiB.
  EXPECT_EQ(program.arena_bytes, 4 * kKiB);
}

TEST(Rewriter, RecomputationRebuildsMissingInputsFirst) {
  const ir::Graph graph = ParseOrDie(ChainText("", "recompute", "recompute"));
  const Program program = BuildVerified(graph, PinnedPlan(graph));
  const std::vector<size_t> recomputes = IndicesOf(program, InstructionKind::kRecompute);
  ASSERT_EQ(recomputes.size(), 2u);
  // db needs c at step 3; c needs b, which is gone too: b, then c. The rebuilt
  // b stays until da reads it at step 4, so it is recomputed only once.
  EXPECT_EQ(program.graph->node(program.instructions[recomputes[0]].node).name, "b");
  EXPECT_EQ(program.graph->node(program.instructions[recomputes[1]].node).name, "c");
  EXPECT_LT(recomputes[1], ComputeOf(program, "db"));
}

TEST(Rewriter, RejectsPlansThatCannotBeCarriedOut) {
  const ir::Graph graph = ParseOrDie(ChainText());
  Plan spill_param("manual", graph);
  spill_param.Spill(*graph.FindValue("w"));
  absl::StatusOr<Program> program = BuildProgram(graph, TrainingSchedule(graph), spill_param);
  ASSERT_FALSE(program.ok());
  EXPECT_THAT(StatusMessage(program.status()), HasSubstr("'w'"));

  Plan recompute_grad("manual", graph);
  recompute_grad.Recompute(*graph.FindValue("db"));
  program = BuildProgram(graph, TrainingSchedule(graph), recompute_grad);
  ASSERT_FALSE(program.ok());
  EXPECT_THAT(StatusMessage(program.status()), HasSubstr("'db'"));
}

TEST(Rewriter, UnknownPinsAreErrorsNamingTheNode) {
  const ir::Graph graph = ParseOrDie(ChainText("sometimes"));
  Plan plan("pinned", graph);
  absl::Status status = ApplyPins(graph, plan);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(StatusMessage(status), HasSubstr("node 'a'"));
  EXPECT_THAT(StatusMessage(status), HasSubstr("sometimes"));
}

TEST(Rewriter, RecomputedBatchNormReadsItsSavedStatistics) {
  const autodiff::TrainingGraph training = TrainingModel("resnet18", 32);
  const ir::Graph& graph = training.graph;
  Plan plan("all-recompute", graph);
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    if (CanRecompute(graph, saved.value)) plan.Recompute(saved.value);
  }
  const Program program = BuildVerified(graph, plan);
  int batch_norms = 0;
  for (size_t i : IndicesOf(program, InstructionKind::kRecompute)) {
    const Instruction& recompute = program.instructions[i];
    const ir::Node& node = graph.node(recompute.node);
    if (node.op != ir::OpKind::kBatchNorm) continue;
    ++batch_norms;
    ASSERT_EQ(recompute.reads.size(), 7u);
    EXPECT_EQ(recompute.reads[3], kNoBuffer);  // running statistics: not read
    EXPECT_EQ(recompute.reads[4], kNoBuffer);
    EXPECT_EQ(program.buffer(recompute.reads[5]).value, node.outputs[1]);
    EXPECT_EQ(program.buffer(recompute.reads[6]).value, node.outputs[2]);
    // Running statistics are not written twice.
    EXPECT_EQ(recompute.writes[3], kNoBuffer);
    EXPECT_EQ(recompute.writes[4], kNoBuffer);
  }
  EXPECT_GT(batch_norms, 0);
}

// conv2d_backward_data with acc (autodiff's sum of a value's gradients)
// writes dx over acc's buffer where acc dies there, and never over dy's or
// w's, which it reads throughout; not even where acc is dy itself.
TEST(Rewriter, AnAccumulatingInputGradientTakesOnlyTheAccumulatorsBuffer) {
  const autodiff::TrainingGraph resnet = TrainingModel("resnet18", 32);
  const Program program = BuildVerified(resnet.graph, Plan("none", resnet.graph));
  int accumulating = 0;
  int over_acc = 0;
  for (size_t i : IndicesOf(program, InstructionKind::kCompute)) {
    const Instruction& compute = program.instructions[i];
    const ir::Node& node = resnet.graph.node(compute.node);
    if (node.op != ir::OpKind::kConv2dBackwardData || node.inputs.size() != 3) continue;
    ++accumulating;
    EXPECT_NE(compute.writes[0], compute.reads[0]) << node.name;
    EXPECT_NE(compute.writes[0], compute.reads[1]) << node.name;
    over_acc += compute.writes[0] == compute.reads[2] ? 1 : 0;
  }
  EXPECT_GT(accumulating, 0);
  EXPECT_GT(over_acc, 0);

  // h = relu(conv_a(x)); out = conv_b(h) + h: conv_b's dy is the add's
  // pass-through, which is also its acc.
  ir::Graph graph("residual");
  ir::GraphBuilder b(graph);
  const ir::ValueId x = b.Input("x", ir::Activation({1, 4, 4, 4}));
  const ir::ValueId labels = b.Input("labels", ir::I64({1}));
  const ir::AttrMap same = {{"pads", ir::IntList{1, 1, 1, 1}}};
  const ir::ValueId h = b.Op(
      ir::OpKind::kRelu,
      {b.Op(ir::OpKind::kConv2d, {x, b.Parameter("wa", ir::F32({4, 3, 3, 4}))}, same, "conv_a")},
      {}, "h");
  const ir::ValueId conv_b =
      b.Op(ir::OpKind::kConv2d, {h, b.Parameter("wb", ir::F32({4, 3, 3, 4}))}, same, "conv_b");
  const ir::ValueId sum = b.Op(ir::OpKind::kAdd, {conv_b, h}, {}, "residual");
  const ir::ValueId pooled = b.Op(
      ir::OpKind::kFlatten, {b.Op(ir::OpKind::kGlobalAvgPool, {sum}, {}, "pool")}, {}, "features");
  b.Output(b.Op(ir::OpKind::kCrossEntropyLoss, {pooled, labels}, {}, "loss"));
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<autodiff::TrainingGraph> training = autodiff::BuildTrainingGraph(graph, {});
  ASSERT_TRUE(training.ok()) << training.status();
  const Program residual = BuildVerified(training->graph, Plan("none", training->graph));
  const Instruction& compute = residual.instructions[ComputeOf(residual, "bwd/conv_b.data")];
  ASSERT_EQ(compute.reads.size(), 3u);
  EXPECT_EQ(compute.reads[0], compute.reads[2]);
  EXPECT_NE(compute.writes[0], compute.reads[0]);
}

class EveryModel : public ::testing::TestWithParam<std::string> {};

// The extremes a policy can ask for: every saved tensor spilled, or every one
// that can be recomputed recomputed (the rest spilled). Both must verify.
TEST_P(EveryModel, ExtremePlansVerify) {
  // VGG-16's classifier needs a multiple of 224; the others take any size.
  const autodiff::TrainingGraph training =
      TrainingModel(GetParam(), GetParam() == "vgg16" ? 224 : 64);
  const ir::Graph& graph = training.graph;
  const Program none = BuildVerified(graph, Plan("none", graph));
  Plan spill_all("spill-all", graph);
  Plan recompute_all("recompute-all", graph);
  for (const autodiff::SavedTensor& saved : autodiff::SavedTensors(graph)) {
    if (!CanSpill(graph, saved.value)) continue;
    spill_all.Spill(saved.value);
    if (CanRecompute(graph, saved.value)) {
      recompute_all.Recompute(saved.value);
    } else {
      recompute_all.Spill(saved.value);
    }
  }
  const Program spilled = BuildVerified(graph, spill_all);
  BuildVerified(graph, recompute_all);
  // At these sizes the memory-aware backward order can bring `none`'s peak
  // down to the update phase (weights, their gradients and momentum), which
  // no spill lowers; so at most equal, and the spills are real.
  EXPECT_LE(spilled.arena_bytes, none.arena_bytes);
  EXPECT_GT(spilled.host_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModel,
                         ::testing::Values("resnet18", "resnet50", "vgg16", "deeplabv3plus", "unet",
                                           "gpt2"),
                         [](const auto& param) { return param.param; });

}  // namespace
}  // namespace spillway::program
