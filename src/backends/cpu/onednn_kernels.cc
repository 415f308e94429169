#include "backends/cpu/onednn_kernels.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/host_memory.h"
#include "fmt/format.h"
#include "ir/attributes.h"
#include "ir/op_kind.h"
#include "ir/types.h"
#include "support/check.h"

namespace spillway::backends::cpu {
namespace {

using Dims = dnnl::memory::dims;
using MemoryDesc = dnnl::memory::desc;
using Tag = dnnl::memory::format_tag;
constexpr dnnl::memory::data_type kF32 = dnnl::memory::data_type::f32;

// ---- plans ----

// Where a primitive argument's bytes are: a tensor of the call, or a piece of
// the workspace (a reordered copy).
struct Operand {
  enum class Source { kInput, kOutput, kWorkspace };
  Source source = Source::kInput;
  int64_t index = 0;  // input or output index, or byte offset into the workspace
  MemoryDesc desc;
};

struct Step {
  dnnl::primitive primitive;
  std::vector<std::pair<int, Operand>> args;  // DNNL_ARG_* -> operand
};

}  // namespace

struct OneDnnPlan {
  // Reorders into the primitive's layouts, the primitive, then reorders out
  // of them or an add (PlanBuilder::AddedTo).
  std::vector<Step> steps;
  int64_t workspace_bytes = 0;
  std::string implementation;  // the main primitive's, as oneDNN names it ("jit:avx2")
};

namespace {

// Collects a plan's steps: reorders of inputs before the main primitive,
// reorders of outputs after it.
class PlanBuilder {
 public:
  PlanBuilder(const dnnl::engine& engine, int64_t& primitives_created)
      : engine_(engine), primitives_created_(primitives_created) {}

  static Operand Input(int index, const MemoryDesc& desc) {
    return {Operand::Source::kInput, index, desc};
  }
  static Operand Output(int index, const MemoryDesc& desc) {
    return {Operand::Source::kOutput, index, desc};
  }

  // `user` in the layout the primitive wants: itself, or a reordered copy.
  Operand ToPrimitive(const Operand& user, const MemoryDesc& wanted) {
    if (wanted == user.desc) return user;
    Operand copy = Workspace(wanted);
    before_.push_back(Reorder(user, copy));
    return copy;
  }

  // Where the primitive writes an output it produces in layout `produced`:
  // the user's tensor, or a copy reordered into it afterwards.
  Operand FromPrimitive(const Operand& user, const MemoryDesc& produced) {
    if (produced == user.desc) return user;
    Operand copy = Workspace(produced);
    after_.push_back(Reorder(copy, user));
    return copy;
  }

  // Where the primitive writes a product that is then added to `addend` into
  // `user` (user = addend + product, by a binary add; `user` may be
  // `addend`'s own buffer): a workspace of `user`'s layout.
  Operand AddedTo(const Operand& user, const Operand& addend) {
    Operand product = Workspace(user.desc);
    ++primitives_created_;
    dnnl::binary::primitive_desc pd(
        dnnl::binary::desc(dnnl::algorithm::binary_add, addend.desc, user.desc, user.desc),
        engine_);
    after_.push_back(
        Step{dnnl::binary(pd),
             {{DNNL_ARG_SRC_0, addend}, {DNNL_ARG_SRC_1, product}, {DNNL_ARG_DST, user}}});
    return product;
  }

  void Main(const dnnl::primitive_desc_base& pd, dnnl::primitive primitive,
            std::vector<std::pair<int, Operand>> args) {
    ++primitives_created_;
    implementation_ = pd.impl_info_str();
    main_ = Step{std::move(primitive), std::move(args)};
  }

  std::shared_ptr<const OneDnnPlan> Finish() {
    SPILLWAY_CHECK(main_.has_value(), "a plan has a main primitive");
    auto plan = std::make_shared<OneDnnPlan>();
    plan->steps = std::move(before_);
    plan->steps.push_back(*std::move(main_));
    for (Step& step : after_) plan->steps.push_back(std::move(step));
    plan->workspace_bytes = workspace_bytes_;
    plan->implementation = implementation_;
    return plan;
  }

 private:
  Operand Workspace(const MemoryDesc& desc) {
    Operand operand{Operand::Source::kWorkspace, workspace_bytes_, desc};
    const auto bytes = static_cast<int64_t>(desc.get_size());
    workspace_bytes_ += (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    return operand;
  }

  Step Reorder(const Operand& from, const Operand& to) {
    ++primitives_created_;
    dnnl::reorder::primitive_desc pd(engine_, from.desc, engine_, to.desc);
    return Step{dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}};
  }

  const dnnl::engine& engine_;
  int64_t& primitives_created_;
  std::vector<Step> before_;
  std::optional<Step> main_;
  std::vector<Step> after_;
  int64_t workspace_bytes_ = 0;
  std::string implementation_;
};

// ---- descriptors ----

MemoryDesc Plain(const Dims& dims, Tag tag) { return MemoryDesc(dims, kF32, tag); }
MemoryDesc AnyLayout(const MemoryDesc& desc) { return MemoryDesc(desc.dims(), kF32, Tag::any); }

// An NHWC activation [N,H,W,C] as oneDNN's logical NCHW dims with nhwc layout.
MemoryDesc Activation(const ir::Shape& nhwc) {
  return Plain({nhwc[0], nhwc[3], nhwc[1], nhwc[2]}, Tag::nhwc);
}

// OHWI weights [O,KH,KW,I/g]. With groups the memory order is
// [g][O/g][KH][KW][I/g], which is oneDNN's gohwi over its (g, o, i, h, w) dims.
MemoryDesc ConvWeights(const ir::Shape& ohwi, int64_t groups) {
  if (groups == 1) return Plain({ohwi[0], ohwi[3], ohwi[1], ohwi[2]}, Tag::ohwi);
  return Plain({groups, ohwi[0] / groups, ohwi[3], ohwi[1], ohwi[2]}, Tag::gohwi);
}

// All elements of a tensor as one dense vector (elementwise ops).
MemoryDesc Flat(const TensorRef& tensor) { return Plain({tensor.num_elements()}, Tag::a); }

// Row-major dims with explicit strides (matmul operands, possibly transposed).
MemoryDesc Strided(const Dims& dims, const Dims& strides) {
  return MemoryDesc(dims, kF32, strides);
}

bool ImplementedByReference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

ir::IntList Ints(const ir::AttrMap& attrs, std::string_view name, ir::IntList fallback) {
  absl::StatusOr<ir::IntList> value = attrs.GetInts(name, std::move(fallback));
  SPILLWAY_CHECK(value.ok(), "attributes were validated");
  return *std::move(value);
}
int64_t Int(const ir::AttrMap& attrs, std::string_view name, int64_t fallback) {
  absl::StatusOr<int64_t> value = attrs.GetInt(name, fallback);
  SPILLWAY_CHECK(value.ok(), "attributes were validated");
  return *value;
}
bool Bool(const ir::AttrMap& attrs, std::string_view name, bool fallback) {
  absl::StatusOr<bool> value = attrs.GetBool(name, fallback);
  SPILLWAY_CHECK(value.ok(), "attributes were validated");
  return *value;
}
double Float(const ir::AttrMap& attrs, std::string_view name, double fallback) {
  absl::StatusOr<double> value = attrs.GetFloat(name, fallback);
  SPILLWAY_CHECK(value.ok(), "attributes were validated");
  return *value;
}

// Window geometry in oneDNN's terms ([h, w] each).
struct Window {
  Dims strides;
  Dims dilations;  // oneDNN counts the gaps: our dilation - 1
  Dims pad_begin;
  Dims pad_end;
};

Window WindowOf(const ir::AttrMap& attrs, const ir::IntList& default_strides) {
  const ir::IntList strides = Ints(attrs, "strides", default_strides);
  const ir::IntList pads = Ints(attrs, "pads", {0, 0, 0, 0});
  const ir::IntList dilations = Ints(attrs, "dilations", {1, 1});
  return Window{.strides = {strides[0], strides[1]},
                .dilations = {dilations[0] - 1, dilations[1] - 1},
                .pad_begin = {pads[0], pads[1]},
                .pad_end = {pads[2], pads[3]}};
}

// ---- implementations avoided ----

// What decides whether a convolution reaches a defect: its op and geometry.
struct ConvolutionGeometry {
  ir::OpKind op;
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t input_channels_per_group;
};

// Implementations of oneDNN that misbehave on some shapes, found by running
// the CPU backend under valgrind (scripts/valgrind.sh). When oneDNN picks one
// for such a shape, the plan moves on to the next implementation oneDNN
// offers for the same descriptor; if there is none, the op falls through to
// the reference kernel.
struct AvoidedImplementation {
  ir::OpKind op;
  std::string_view implementation_prefix;  // of impl_info_str()
  int last_major_version;  // oneDNN versions up to this major (later ones unverified)
  bool (*affects)(const ConvolutionGeometry&, std::string_view implementation);
};

// oneDNN's JIT 1x1 weight gradient (jit_1x1:avx2, jit_1x1:avx512_core)
// first copies a strided input into a dense per-thread buffer, and for NHWC
// inputs with fewer input channels per group than its channel block (8 floats
// for AVX2, 16 for AVX-512) it indexes that buffer by the block rather than
// by the channel count: it writes past the buffer's end, and then reads
// neighbouring heap bytes back as input. The result is a crash, a corrupted
// heap or gradients that differ from run to run. Seen in oneDNN 2.6.3;
// reported upstream as oneDNN issue 6035. The next implementation (jit:avx2,
// jit:avx512_core) is clean on every such shape (docs/backends.md).
bool StridedOneByOneBelowTheChannelBlock(const ConvolutionGeometry& g,
                                         std::string_view implementation) {
  const int64_t channel_block = implementation.find("avx512") != std::string_view::npos ? 16 : 8;
  return g.kernel_h == 1 && g.kernel_w == 1 && (g.stride_h > 1 || g.stride_w > 1) &&
         g.input_channels_per_group < channel_block;
}

constexpr AvoidedImplementation kAvoidedImplementations[] = {
    {ir::OpKind::kConv2dBackwardWeight, "jit_1x1:", 2, StridedOneByOneBelowTheChannelBlock},
};

bool Avoided(const ConvolutionGeometry& geometry, const std::string& implementation) {
  const int major = dnnl_version()->major;
  for (const AvoidedImplementation& avoided : kAvoidedImplementations) {
    if (avoided.op == geometry.op && implementation.starts_with(avoided.implementation_prefix) &&
        major <= avoided.last_major_version && avoided.affects(geometry, implementation)) {
      return true;
    }
  }
  return false;
}

// Moves `pd` past the avoided implementations; false when none is left.
template <typename PrimitiveDesc>
bool SkipAvoided(PrimitiveDesc& pd, const ConvolutionGeometry& geometry) {
  while (Avoided(geometry, pd.impl_info_str())) {
    if (!pd.next_impl()) return false;
  }
  return true;
}

// ---- convolution ----

// x [N,H,W,C] * w [O,KH,KW,C/g] -> y [N,OH,OW,O], and both gradients. The
// primitives read and write our NHWC activations directly: on AVX-512,
// oneDNN 2.6 has NHWC kernels for all three (brgconv forward, jit backward),
// and on ResNet-50's layers they were as fast as or faster than letting the
// primitive pick a blocked layout and reordering activations in and out.
// Weights go in the layout the primitive prefers, reordered from and to OHWI
// by reorders that are part of the plan (none when the layouts agree).
std::shared_ptr<const OneDnnPlan> BuildConvolution(const KernelCall& call,
                                                   const dnnl::engine& engine,
                                                   PlanBuilder& builder) {
  const ir::AttrMap& attrs = call.node.attrs;
  const int64_t groups = Int(attrs, "groups", 1);
  const Window window = WindowOf(attrs, {1, 1});
  const ir::OpKind op = call.node.op;
  const ir::Shape& x_shape = op == ir::OpKind::kConv2d               ? call.inputs[0].type->shape
                             : op == ir::OpKind::kConv2dBackwardData ? call.outputs[0].type->shape
                                                                     : call.inputs[1].type->shape;
  const ir::Shape& w_shape = op == ir::OpKind::kConv2dBackwardWeight ? call.outputs[0].type->shape
                                                                     : call.inputs[1].type->shape;
  const ir::Shape& y_shape =
      op == ir::OpKind::kConv2d ? call.outputs[0].type->shape : call.inputs[0].type->shape;
  const MemoryDesc x_md = Activation(x_shape);
  const MemoryDesc w_md = ConvWeights(w_shape, groups);
  const MemoryDesc y_md = Activation(y_shape);
  const bool has_bias =
      op == ir::OpKind::kConv2d && call.inputs.size() == 3 && call.inputs[2].data != nullptr;
  const MemoryDesc b_md = Plain({w_shape[0]}, Tag::a);

  auto forward_desc = [&] {
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const auto prop = dnnl::prop_kind::forward_training;
    if (has_bias) {
      return dnnl::convolution_forward::desc(prop, algorithm, x_md, AnyLayout(w_md), b_md, y_md,
                                             window.strides, window.dilations, window.pad_begin,
                                             window.pad_end);
    }
    return dnnl::convolution_forward::desc(prop, algorithm, x_md, AnyLayout(w_md), y_md,
                                           window.strides, window.dilations, window.pad_begin,
                                           window.pad_end);
  };
  const ConvolutionGeometry geometry{.op = op,
                                     .kernel_h = w_shape[1],
                                     .kernel_w = w_shape[2],
                                     .stride_h = window.strides[0],
                                     .stride_w = window.strides[1],
                                     .input_channels_per_group = w_shape[3]};
  dnnl::convolution_forward::primitive_desc forward(forward_desc(), engine);

  switch (op) {
    case ir::OpKind::kConv2d: {
      if (!SkipAvoided(forward, geometry)) return nullptr;
      if (ImplementedByReference(forward.impl_info_str())) return nullptr;
      std::vector<std::pair<int, Operand>> args{
          {DNNL_ARG_SRC, PlanBuilder::Input(0, x_md)},
          {DNNL_ARG_WEIGHTS,
           builder.ToPrimitive(PlanBuilder::Input(1, w_md), forward.weights_desc())},
          {DNNL_ARG_DST, PlanBuilder::Output(0, y_md)}};
      if (has_bias) args.emplace_back(DNNL_ARG_BIAS, PlanBuilder::Input(2, b_md));
      builder.Main(forward, dnnl::convolution_forward(forward), std::move(args));
      return builder.Finish();
    }
    case ir::OpKind::kConv2dBackwardData: {
      dnnl::convolution_backward_data::primitive_desc backward(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_md,
                                                AnyLayout(w_md), y_md, window.strides,
                                                window.dilations, window.pad_begin, window.pad_end),
          engine, forward);
      if (!SkipAvoided(backward, geometry)) return nullptr;
      if (ImplementedByReference(backward.impl_info_str())) return nullptr;
      // With acc (a third input), the product goes to a workspace and a binary
      // add writes acc + product into dx, which may be acc's buffer.
      const Operand dx = call.inputs.size() == 3 ? builder.AddedTo(PlanBuilder::Output(0, x_md),
                                                                   PlanBuilder::Input(2, x_md))
                                                 : PlanBuilder::Output(0, x_md);
      builder.Main(backward, dnnl::convolution_backward_data(backward),
                   {{DNNL_ARG_DIFF_DST, PlanBuilder::Input(0, y_md)},
                    {DNNL_ARG_WEIGHTS,
                     builder.ToPrimitive(PlanBuilder::Input(1, w_md), backward.weights_desc())},
                    {DNNL_ARG_DIFF_SRC, dx}});
      return builder.Finish();
    }
    case ir::OpKind::kConv2dBackwardWeight: {
      dnnl::convolution_backward_weights::primitive_desc backward(
          dnnl::convolution_backward_weights::desc(
              dnnl::algorithm::convolution_direct, x_md, AnyLayout(w_md), y_md, window.strides,
              window.dilations, window.pad_begin, window.pad_end),
          engine, forward);
      if (!SkipAvoided(backward, geometry)) return nullptr;
      if (ImplementedByReference(backward.impl_info_str())) return nullptr;
      builder.Main(backward, dnnl::convolution_backward_weights(backward),
                   {{DNNL_ARG_DIFF_DST, PlanBuilder::Input(0, y_md)},
                    {DNNL_ARG_SRC, PlanBuilder::Input(1, x_md)},
                    {DNNL_ARG_DIFF_WEIGHTS, builder.FromPrimitive(PlanBuilder::Output(0, w_md),
                                                                  backward.diff_weights_desc())}});
      return builder.Finish();
    }
    default:
      SPILLWAY_CHECK(false, "not a convolution");
  }
  return nullptr;
}

// ---- pooling ----

// max_pool and avg_pool forward, avg_pool_backward. max_pool_backward is a
// direct kernel (direct_kernels.h): oneDNN's needs the forward's workspace of
// argmax positions, which our graph does not keep.
std::shared_ptr<const OneDnnPlan> BuildPooling(const KernelCall& call, const dnnl::engine& engine,
                                               PlanBuilder& builder) {
  const ir::AttrMap& attrs = call.node.attrs;
  const ir::IntList kernel_list = Ints(attrs, "kernel", {});
  const Dims kernel{kernel_list[0], kernel_list[1]};
  const Window window = WindowOf(attrs, kernel_list);
  const bool is_max = call.node.op == ir::OpKind::kMaxPool;
  const dnnl::algorithm algorithm = is_max ? dnnl::algorithm::pooling_max
                                    : Bool(attrs, "count_include_pad", false)
                                        ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding;
  const bool backward = call.node.op == ir::OpKind::kAvgPoolBackward;
  const MemoryDesc x_md =
      Activation(backward ? call.outputs[0].type->shape : call.inputs[0].type->shape);
  const MemoryDesc y_md =
      Activation(backward ? call.inputs[0].type->shape : call.outputs[0].type->shape);
  // Inference propagation: max pooling then keeps no workspace.
  const dnnl::pooling_forward::primitive_desc forward(
      dnnl::pooling_forward::desc(
          backward ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
          algorithm, x_md, y_md, window.strides, kernel, window.pad_begin, window.pad_end),
      engine);
  if (!backward) {
    if (ImplementedByReference(forward.impl_info_str())) return nullptr;
    builder.Main(forward, dnnl::pooling_forward(forward),
                 {{DNNL_ARG_SRC, PlanBuilder::Input(0, x_md)},
                  {DNNL_ARG_DST, PlanBuilder::Output(0, y_md)}});
    return builder.Finish();
  }
  const dnnl::pooling_backward::primitive_desc pd(
      dnnl::pooling_backward::desc(algorithm, x_md, y_md, window.strides, kernel, window.pad_begin,
                                   window.pad_end),
      engine, forward);
  if (ImplementedByReference(pd.impl_info_str())) return nullptr;
  builder.Main(pd, dnnl::pooling_backward(pd),
               {{DNNL_ARG_DIFF_DST, PlanBuilder::Input(0, y_md)},
                {DNNL_ARG_DIFF_SRC, PlanBuilder::Output(0, x_md)}});
  return builder.Finish();
}

// ---- elementwise ----

// relu, gelu and their backward ops over the flattened tensor. relu_backward
// gets (dy, y): oneDNN's relu "from dst" gives dx = y > 0 ? dy : 0, which is
// the same since y > 0 exactly where x > 0. gelu_backward gets (dy, x).
std::shared_ptr<const OneDnnPlan> BuildEltwise(const KernelCall& call, const dnnl::engine& engine,
                                               PlanBuilder& builder) {
  const ir::OpKind op = call.node.op;
  const bool is_relu = op == ir::OpKind::kRelu || op == ir::OpKind::kReluBackward;
  dnnl::algorithm algorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
  if (!is_relu) {
    absl::StatusOr<std::string> approximate = call.node.attrs.GetString("approximate", "none");
    SPILLWAY_CHECK(approximate.ok(), "attributes were validated");
    algorithm = *approximate == "tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                       : dnnl::algorithm::eltwise_gelu_erf;
  }
  const MemoryDesc md = Flat(call.outputs[0]);
  const dnnl::eltwise_forward::primitive_desc forward(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm, md, 0.0f, 0.0f),
      engine);
  if (op == ir::OpKind::kRelu || op == ir::OpKind::kGelu) {
    builder.Main(
        forward, dnnl::eltwise_forward(forward),
        {{DNNL_ARG_SRC, PlanBuilder::Input(0, md)}, {DNNL_ARG_DST, PlanBuilder::Output(0, md)}});
    return builder.Finish();
  }
  const dnnl::eltwise_backward::primitive_desc backward(
      dnnl::eltwise_backward::desc(algorithm, md, md, 0.0f, 0.0f), engine, forward);
  builder.Main(backward, dnnl::eltwise_backward(backward),
               {{DNNL_ARG_DIFF_DST, PlanBuilder::Input(0, md)},
                {is_relu ? DNNL_ARG_DST : DNNL_ARG_SRC, PlanBuilder::Input(1, md)},
                {DNNL_ARG_DIFF_SRC, PlanBuilder::Output(0, md)}});
  return builder.Finish();
}

// ---- matrix products ----

// Row-major strides of dims.
Dims DenseStrides(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// A matmul operand [...,R,C] as the logical [batch...,rows,cols] oneDNN
// multiplies, with its batch axes padded to `rank` with ones. `transposed`:
// the stored matrix is [...,cols,rows].
MemoryDesc MatrixOperand(const ir::Shape& stored, size_t rank, bool transposed) {
  Dims dims(rank - stored.size(), 1);
  dims.insert(dims.end(), stored.begin(), stored.end());
  Dims strides = DenseStrides(dims);
  if (transposed) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return Strided(dims, strides);
}

dnnl::primitive_attr ScaleAttr(double alpha) {
  dnnl::primitive_attr attr;
  if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
  return attr;
}

// matmul (batched, broadcast batch axes, transposes, alpha), linear
// (y = x w^T + b over the flattened leading axes) and linear_backward_weight
// (dw = dy^T x summed over the leading axes).
std::shared_ptr<const OneDnnPlan> BuildMatrixProduct(const KernelCall& call,
                                                     const dnnl::engine& engine,
                                                     PlanBuilder& builder) {
  const ir::OpKind op = call.node.op;
  MemoryDesc a_md, b_md, c_md;
  std::optional<MemoryDesc> bias_md;
  double alpha = 1.0;
  if (op == ir::OpKind::kMatMul) {
    const ir::Shape& c_shape = call.outputs[0].type->shape;
    const size_t rank = c_shape.size();
    if (rank > DNNL_MAX_NDIMS) return nullptr;
    a_md = MatrixOperand(call.inputs[0].type->shape, rank,
                         Bool(call.node.attrs, "transpose_a", false));
    b_md = MatrixOperand(call.inputs[1].type->shape, rank,
                         Bool(call.node.attrs, "transpose_b", false));
    c_md = Strided(Dims(c_shape.begin(), c_shape.end()), DenseStrides(c_shape));
    alpha = Float(call.node.attrs, "alpha", 1.0);
  } else if (op == ir::OpKind::kLinear) {
    const int64_t out = call.inputs[1].type->shape[0];
    const int64_t in = call.inputs[1].type->shape[1];
    const int64_t rows = call.inputs[0].num_elements() / in;
    a_md = Strided({rows, in}, {in, 1});
    b_md = Strided({in, out}, {1, in});  // w [out,in] read as w^T
    c_md = Strided({rows, out}, {out, 1});
    if (call.inputs.size() == 3 && call.inputs[2].data != nullptr) {
      bias_md = Strided({1, out}, {out, 1});
    }
  } else {  // linear_backward_weight
    const int64_t out = call.outputs[0].type->shape[0];
    const int64_t in = call.outputs[0].type->shape[1];
    const int64_t rows = call.inputs[0].num_elements() / out;
    a_md = Strided({out, rows}, {1, out});  // dy [rows,out] read as dy^T
    b_md = Strided({rows, in}, {in, 1});
    c_md = Strided({out, in}, {in, 1});
  }
  const dnnl::matmul::primitive_desc pd =
      bias_md.has_value()
          ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, *bias_md, c_md), engine)
          : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), ScaleAttr(alpha),
                                         engine);
  if (ImplementedByReference(pd.impl_info_str())) return nullptr;
  std::vector<std::pair<int, Operand>> args{{DNNL_ARG_SRC, PlanBuilder::Input(0, a_md)},
                                            {DNNL_ARG_WEIGHTS, PlanBuilder::Input(1, b_md)},
                                            {DNNL_ARG_DST, PlanBuilder::Output(0, c_md)}};
  if (bias_md.has_value()) args.emplace_back(DNNL_ARG_BIAS, PlanBuilder::Input(2, *bias_md));
  builder.Main(pd, dnnl::matmul(pd), std::move(args));
  return builder.Finish();
}

// ---- running plans ----

bool AllF32(const KernelCall& call) {
  auto f32 = [](const TensorRef& tensor) {
    return tensor.type == nullptr || tensor.type->dtype == ir::DType::kF32;
  };
  return std::all_of(call.inputs.begin(), call.inputs.end(), f32) &&
         std::all_of(call.outputs.begin(), call.outputs.end(), f32);
}

// The op, its attributes and its tensor types: what a plan depends on.
std::string PlanKey(const KernelCall& call) {
  std::string key(ir::OpName(call.node.op));
  for (const auto& [name, value] : call.node.attrs.values()) {
    absl::StrAppend(&key, " ", name, "=", ir::AttrValueToString(value));
  }
  for (const TensorRef& input : call.inputs) {
    absl::StrAppend(
        &key, " ",
        input.data == nullptr || input.type == nullptr ? "-" : ir::TypeToString(*input.type));
  }
  absl::StrAppend(&key, " ->");
  for (const TensorRef& output : call.outputs) {
    if (output.type != nullptr) absl::StrAppend(&key, " ", ir::TypeToString(*output.type));
  }
  return key;
}

// The calling thread's workspace for reordered copies, grown on demand and
// kept: steps reuse it instead of faulting in fresh pages every call.
absl::StatusOr<std::byte*> ThreadWorkspace(int64_t bytes) {
  struct Buffer {
    void* data = nullptr;
    int64_t bytes = 0;
    ~Buffer() { FreeAligned(data); }
  };
  thread_local Buffer buffer;
  if (buffer.bytes < bytes) {
    FreeAligned(buffer.data);
    buffer = {};
    absl::StatusOr<void*> memory = AllocateAligned(bytes, "oneDNN workspace");
    if (!memory.ok()) return memory.status();
    buffer.data = *memory;
    buffer.bytes = bytes;
  }
  return static_cast<std::byte*>(buffer.data);
}

}  // namespace

OneDnnKernels::OneDnnKernels() : engine_(dnnl::engine::kind::cpu, 0) {}
OneDnnKernels::~OneDnnKernels() = default;

int64_t OneDnnKernels::primitives_created() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return primitives_created_;
}

std::string OneDnnKernels::Implementation(const KernelCall& call) {
  std::shared_ptr<const OneDnnPlan> plan = FindOrBuild(call);
  return plan == nullptr ? std::string() : plan->implementation;
}

std::shared_ptr<const OneDnnPlan> OneDnnKernels::Build(const KernelCall& call) {
  if (!AllF32(call)) return nullptr;
  PlanBuilder builder(engine_, primitives_created_);
  try {
    switch (call.node.op) {
      case ir::OpKind::kConv2d:
      case ir::OpKind::kConv2dBackwardData:
      case ir::OpKind::kConv2dBackwardWeight:
        return BuildConvolution(call, engine_, builder);
      case ir::OpKind::kMaxPool:
      case ir::OpKind::kAvgPool:
      case ir::OpKind::kAvgPoolBackward:
        return BuildPooling(call, engine_, builder);
      case ir::OpKind::kRelu:
      case ir::OpKind::kReluBackward:
      case ir::OpKind::kGelu:
      case ir::OpKind::kGeluBackward:
        return BuildEltwise(call, engine_, builder);
      case ir::OpKind::kMatMul:
      case ir::OpKind::kLinear:
      case ir::OpKind::kLinearBackwardWeight:
        return BuildMatrixProduct(call, engine_, builder);
      default:
        return nullptr;
    }
  } catch (const dnnl::error&) {
    // oneDNN has no primitive for this combination (unimplemented): the
    // reference kernel runs it.
    return nullptr;
  }
}

std::shared_ptr<const OneDnnPlan> OneDnnKernels::FindOrBuild(const KernelCall& call) {
  std::string key = PlanKey(call);
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = plans_.try_emplace(std::move(key));
  if (inserted) it->second = Build(call);
  return it->second;
}

absl::StatusOr<bool> OneDnnKernels::Run(const KernelCall& call) {
  std::shared_ptr<const OneDnnPlan> plan = FindOrBuild(call);
  if (plan == nullptr) return false;
  if (call.outputs[0].data == nullptr) return true;  // nothing wanted
  std::byte* workspace = nullptr;
  if (plan->workspace_bytes > 0) {
    absl::StatusOr<std::byte*> memory = ThreadWorkspace(plan->workspace_bytes);
    if (!memory.ok()) return memory.status();
    workspace = *memory;
  }
  try {
    dnnl::stream stream(engine_);
    for (const Step& step : plan->steps) {
      std::unordered_map<int, dnnl::memory> args;
      for (const auto& [arg, operand] : step.args) {
        void* data = nullptr;
        switch (operand.source) {
          case Operand::Source::kInput:
            data = call.inputs[static_cast<size_t>(operand.index)].data;
            break;
          case Operand::Source::kOutput:
            data = call.outputs[static_cast<size_t>(operand.index)].data;
            break;
          case Operand::Source::kWorkspace:
            data = workspace + operand.index;
            break;
        }
        args.emplace(arg, dnnl::memory(operand.desc, engine_, data));
      }
      step.primitive.execute(stream, args);
    }
    stream.wait();
  } catch (const dnnl::error& error) {
    return absl::InternalError(fmt::format("node '{}' ({}): oneDNN failed: {}", call.node.name,
                                           ir::OpName(call.node.op), error.what()));
  }
  return true;
}

}  // namespace spillway::backends::cpu
