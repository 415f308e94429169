#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <array>
#include <optional>

#include "backends/cuda/cuda_kernels.h"
#include "backends/host_memory.h"
#include "fmt/format.h"
#include "ir/op_kind.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::backends::cuda {
namespace {

// A CUDA error as a status naming what was being done. Errors of the device
// (a kernel that faulted) are Internal; running out of memory is
// ResourceExhausted; no device or driver is FailedPrecondition.
absl::Status Check(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = fmt::format("{}: CUDA error {} ({})", what, cudaGetErrorName(error),
                                          cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

size_t Index(program::Stream stream) { return static_cast<size_t>(stream); }

// The element count of a tensor operand (its type's), or nullopt.
std::optional<int64_t> Elements(const TensorRef& tensor) {
  if (tensor.type == nullptr) return std::nullopt;
  return tensor.num_elements();
}

}  // namespace

struct CudaBackend::Handles {
  std::array<cudaStream_t, program::kNumStreams> streams{};
  std::vector<cudaEvent_t> events;
};

absl::StatusOr<int> CountDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(fmt::format(
        "no usable CUDA device: {} ({})", cudaGetErrorName(error), cudaGetErrorString(error)));
  }
  if (count == 0) return absl::FailedPreconditionError("no usable CUDA device: none found");
  return count;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(const int count, CountDevices());
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        fmt::format("CUDA device {} does not exist; this machine has {} (0 to {})", options.device,
                    count, count - 1));
  }
  RETURN_IF_ERROR(Check(cudaSetDevice(options.device), "selecting the CUDA device"));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options.device));
  for (cudaStream_t& stream : backend->handles_->streams) {
    RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a CUDA stream"));
  }
  return backend;
}

CudaBackend::CudaBackend(int device) : device_(device), handles_(std::make_unique<Handles>()) {}

CudaBackend::~CudaBackend() {
  // Best effort: the device may already be in an error state.
  cudaSetDevice(device_);
  for (cudaEvent_t event : handles_->events) cudaEventDestroy(event);
  for (cudaStream_t stream : handles_->streams) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
}

absl::StatusOr<void*> CudaBackend::AllocateDevice(int64_t bytes) {
  RETURN_IF_ERROR(Use());
  void* memory = nullptr;
  RETURN_IF_ERROR(Check(cudaMalloc(&memory, static_cast<size_t>(std::max<int64_t>(bytes, 1))),
                        fmt::format("allocating {} of device memory", FormatBytes(bytes))));
  return memory;
}

void CudaBackend::FreeDevice(void* memory) { cudaFree(memory); }

// Pinned, so that copies on the copy streams run asynchronously and overlap
// with kernels. The runtime's host pool keeps the blocks from step to step.
absl::StatusOr<void*> CudaBackend::AllocateHost(int64_t bytes) {
  void* memory = nullptr;
  RETURN_IF_ERROR(Check(cudaHostAlloc(&memory, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                                      cudaHostAllocDefault),
                        fmt::format("pinning {} of host memory", FormatBytes(bytes))));
  return memory;
}

void CudaBackend::FreeHost(void* memory) { cudaFreeHost(memory); }

AvailableMemory CudaBackend::Available() const {
  AvailableMemory available{
      .device_bytes = std::nullopt, .host_bytes = AvailableHostBytes(), .shared = false};
  size_t free = 0;
  size_t total = 0;
  if (Use().ok() && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    available.device_bytes = static_cast<int64_t>(free);
  }
  return available;
}

absl::Status CudaBackend::CheckSupported(const ir::Graph& /*graph*/, const ir::Node& node) const {
  return CudaSupports(node);
}

absl::Status CudaSupports(const ir::Node& node) {
  switch (node.op) {
    case ir::OpKind::kRelu:
    case ir::OpKind::kReluBackward:
    case ir::OpKind::kAdd:
    case ir::OpKind::kSub:
    case ir::OpKind::kMul:
      break;
    default:
      return absl::UnimplementedError(
          "the CUDA backend has no kernel for this op yet (it runs relu, relu_backward, add, sub "
          "and mul)");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Prepare(const program::Program& program) {
  RETURN_IF_ERROR(Use());
  for (cudaEvent_t event : handles_->events) cudaEventDestroy(event);
  handles_->events.assign(static_cast<size_t>(program.num_events), nullptr);
  for (cudaEvent_t& event : handles_->events) {
    // Ordering only: no timing, so recording and waiting stay cheap.
    RETURN_IF_ERROR(
        Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating a CUDA event"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Use() const {
  // The current device is per host thread, and the runtime calls from one
  // thread per stream.
  return Check(cudaSetDevice(device_), "selecting the CUDA device");
}

absl::Status CudaBackend::RecordEvent(program::Stream stream, program::EventId event) {
  RETURN_IF_ERROR(Use());
  return Check(cudaEventRecord(handles_->events.at(static_cast<size_t>(event)),
                               handles_->streams[Index(stream)]),
               fmt::format("recording event {}", event));
}

absl::Status CudaBackend::WaitEvent(program::Stream stream, program::EventId event) {
  RETURN_IF_ERROR(Use());
  return Check(cudaStreamWaitEvent(handles_->streams[Index(stream)],
                                   handles_->events.at(static_cast<size_t>(event)), 0),
               fmt::format("waiting for event {}", event));
}

absl::Status CudaBackend::RunKernel(program::Stream stream, const KernelCall& call) {
  const ir::Node& node = call.node;
  RETURN_IF_ERROR(CudaSupports(node));
  RETURN_IF_ERROR(Use());
  if (call.outputs.empty() || call.outputs[0].data == nullptr) return absl::OkStatus();
  const std::optional<int64_t> n = Elements(call.outputs[0]);
  for (const TensorRef& operand : call.inputs) {
    if (operand.type == nullptr || operand.type->dtype != ir::DType::kF32 ||
        Elements(operand) != n) {
      return absl::UnimplementedError(fmt::format(
          "node '{}' ({}): the CUDA kernels take f32 operands of one shape (no broadcasting yet)",
          node.name, ir::OpName(node.op)));
    }
  }
  cudaStream_t queue = handles_->streams[Index(stream)];
  float* out = call.outputs[0].as<float>();
  cudaError_t error = cudaSuccess;
  switch (node.op) {
    case ir::OpKind::kRelu:
      error = LaunchRelu(call.inputs[0].as<const float>(), out, *n, queue);
      break;
    case ir::OpKind::kReluBackward:
      error = LaunchReluBackward(call.inputs[0].as<const float>(), call.inputs[1].as<const float>(),
                                 out, *n, queue);
      break;
    case ir::OpKind::kAdd:
    case ir::OpKind::kSub:
    case ir::OpKind::kMul: {
      const BinaryOp op = node.op == ir::OpKind::kAdd   ? BinaryOp::kAdd
                          : node.op == ir::OpKind::kSub ? BinaryOp::kSub
                                                        : BinaryOp::kMul;
      error = LaunchBinary(op, call.inputs[0].as<const float>(), call.inputs[1].as<const float>(),
                           out, *n, queue);
      break;
    }
    default:
      break;  // CheckSupported has refused it
  }
  return Check(error, fmt::format("node '{}' ({})", node.name, ir::OpName(node.op)));
}

absl::Status CudaBackend::Copy(program::Stream stream, void* destination, const void* source,
                               int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return Check(cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes), cudaMemcpyDefault,
                               handles_->streams[Index(stream)]),
               fmt::format("copying {}", FormatBytes(bytes)));
}

absl::Status CudaBackend::SynchronizeStream(program::Stream stream) {
  RETURN_IF_ERROR(Use());
  return Check(cudaStreamSynchronize(handles_->streams[Index(stream)]),
               fmt::format("the {} stream", program::StreamName(stream)));
}

absl::Status CudaBackend::Upload(void* device_destination, const void* host_source, int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return Check(cudaMemcpy(device_destination, host_source, static_cast<size_t>(bytes),
                          cudaMemcpyHostToDevice),
               fmt::format("uploading {}", FormatBytes(bytes)));
}

absl::Status CudaBackend::Download(void* host_destination, const void* device_source,
                                   int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return Check(cudaMemcpy(host_destination, device_source, static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToHost),
               fmt::format("downloading {}", FormatBytes(bytes)));
}

}  // namespace spillway::backends::cuda
