// Kernel workspaces, declared per node before planning from shapes alone, so
// that a plan made on a machine without the GPU counts the same bytes as the
// GPU's run. A device whose kernels need workspace (the CUDA backend's: cuDNN's
// convolution workspace, batch norm's partial sums, the loss's per-chunk sums)
// gets one region at the top of the arena, as large as the largest any node
// of the step declares; the kernels run one at a time on the compute stream,
// so they share it. The policies plan the tensors in the budget less that
// region (planner/planner.h), and the runtime hands the region to every
// kernel (backends/kernel.h).
//
// A convolution declares at most `limit` bytes (the hardware profile's
// workspace_limit_bytes) and no more than its largest operand: cuDNN then
// chooses its algorithm among those that fit the region, so the declaration
// is a cap the backend keeps, not a measurement. The CUDA backend's own
// kernels declare exactly what they use (program/workspace_sizes.h).
//
// What one kernel needs that can be as large as a tensor is not in the
// region, which is held through the whole step, but a scratch buffer of its
// own (BufferRole::kScratch) that the rewriter allocates just before the
// instruction and frees just after it, so that it counts only while that
// kernel runs. One kind so far: a convolution whose padding differs between
// the two sides of an axis (U-Net's, after an odd-sized upsampling) runs on a
// copy of its input with the padding written out as zeros, since cuDNN pads
// both sides alike (PaddedCopyBytes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"

namespace spillway::program {

// The scratch the CUDA backend's own kernels take for a node of `op` whose
// inputs have these types: batch norm's partial sums, the loss's chunk totals
// (program/workspace_sizes.h); 0 for any other op. The planner declares it
// (below) and the CUDA backend carves it out of the workspace, both from here.
int64_t OwnKernelScratchBytes(ir::OpKind op, std::span<const ir::TensorType* const> inputs);

// Where a convolution's padding differs between the two sides of an axis,
// the bytes of one image of its activation input `x` (the forward's input,
// whichever way the node computes) with that padding added as zeros (the
// backend convolves such a node an image at a time); 0 where it pads both
// sides alike.
int64_t PaddedCopyBytes(const ir::Node& convolution, const ir::TensorType& x);

// The part of the workspace region `node` declares on a device whose kernels
// may use up to `limit` bytes; 0 where `limit` is 0 (the device keeps its
// kernels' scratch itself, as the CPU backend does) or the node needs none.
int64_t DeclaredWorkspaceBytes(const ir::Graph& graph, const ir::Node& node, int64_t limit);

// The region a step of `graph` reserves: the largest declaration of any node.
int64_t WorkspaceRegionBytes(const ir::Graph& graph, int64_t limit);

// The scratch buffer `node` declares for itself on such a device (its padded
// copy of x); 0 where `limit` is 0 or the node needs none.
int64_t DeclaredScratchBytes(const ir::Graph& graph, const ir::Node& node, int64_t limit);

// DeclaredScratchBytes of every node, indexed by node id; empty where no node
// declares any, which is what the rewriter takes for none.
std::vector<int64_t> ScratchBytesByNode(const ir::Graph& graph, int64_t limit);

}  // namespace spillway::program
