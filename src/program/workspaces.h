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
// is a cap the backend keeps, not a measurement. A convolution whose padding
// differs between the two sides of an axis (U-Net's, after an odd-sized
// upsampling) declares on top of that a copy of its input with the padding
// written out as zeros, since cuDNN pads both sides alike (PaddedCopyBytes).
// The CUDA backend's own kernels declare exactly what they use
// (program/workspace_sizes.h).
#pragma once

#include <cstdint>
#include <span>

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
// sides alike. The copy sits in the workspace after the algorithm's part,
// which is rounded up to PaddedCopyAlignment.
int64_t PaddedCopyBytes(const ir::Node& convolution, const ir::TensorType& x);
inline constexpr int64_t kPaddedCopyAlignment = 256;
constexpr int64_t PaddedCopyOffset(int64_t algorithm_bytes) {
  return (algorithm_bytes + kPaddedCopyAlignment - 1) / kPaddedCopyAlignment * kPaddedCopyAlignment;
}

// The workspace `node` declares on a device whose kernels may use up to
// `limit` bytes; 0 where `limit` is 0 (the device keeps its kernels' scratch
// itself, as the CPU backend does) or the node needs none.
int64_t DeclaredWorkspaceBytes(const ir::Graph& graph, const ir::Node& node, int64_t limit);

// The region a step of `graph` reserves: the largest declaration of any node.
int64_t WorkspaceRegionBytes(const ir::Graph& graph, int64_t limit);

}  // namespace spillway::program
