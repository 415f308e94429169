#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <array>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_status.h"
#include "backends/host_memory.h"
#include "fmt/format.h"
#include "ir/op_kind.h"
#include "support/status_macros.h"
#include "support/units.h"

namespace spillway::backends::cuda {
namespace {

size_t Index(program::Stream stream) { return static_cast<size_t>(stream); }

}  // namespace

struct CudaBackend::Handles {
  std::array<cudaStream_t, program::kNumStreams> streams{};
  std::vector<cudaEvent_t> events;
  cudnnHandle_t cudnn = nullptr;
  Cublas cublas;                 // opened when the backend starts (cublas_library.h)
  std::unique_ptr<CudaOps> ops;  // made once the library handles exist
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
  RETURN_IF_ERROR(CheckCuda(cudaSetDevice(options.device), "selecting the CUDA device"));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options.device));
  Handles& handles = *backend->handles_;
  for (cudaStream_t& stream : handles.streams) {
    RETURN_IF_ERROR(CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "creating a CUDA stream"));
  }
  RETURN_IF_ERROR(CheckCudnn(cudnnCreate(&handles.cudnn), "starting cuDNN"));
  ASSIGN_OR_RETURN(handles.cublas.library, LoadCublas());
  RETURN_IF_ERROR(
      CheckCublas(handles.cublas.library->create(&handles.cublas.handle), "starting cuBLAS"));
  handles.ops =
      std::make_unique<CudaOps>(handles.cudnn, handles.cublas,
                                ConvolutionSettings{.workspace_limit = options.workspace_limit,
                                                    .tf32 = options.tf32,
                                                    .deterministic = options.deterministic});
  return backend;
}

CudaBackend::CudaBackend(int device) : device_(device), handles_(std::make_unique<Handles>()) {}

CudaBackend::~CudaBackend() {
  // Best effort: the device may already be in an error state.
  cudaSetDevice(device_);
  handles_->ops.reset();  // frees its scratch
  if (handles_->cublas.handle != nullptr)
    handles_->cublas.library->destroy(handles_->cublas.handle);
  if (handles_->cudnn != nullptr) cudnnDestroy(handles_->cudnn);
  for (cudaEvent_t event : handles_->events) cudaEventDestroy(event);
  for (cudaStream_t stream : handles_->streams) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
}

absl::StatusOr<void*> CudaBackend::AllocateDevice(int64_t bytes) {
  RETURN_IF_ERROR(Use());
  void* memory = nullptr;
  RETURN_IF_ERROR(CheckCuda(cudaMalloc(&memory, static_cast<size_t>(std::max<int64_t>(bytes, 1))),
                            fmt::format("allocating {} of device memory", FormatBytes(bytes))));
  return memory;
}

void CudaBackend::FreeDevice(void* memory) { cudaFree(memory); }

// Pinned, so that copies on the copy streams run asynchronously and overlap
// with kernels. The runtime's host pool keeps the blocks from step to step.
absl::StatusOr<void*> CudaBackend::AllocateHost(int64_t bytes) {
  void* memory = nullptr;
  RETURN_IF_ERROR(CheckCuda(cudaHostAlloc(&memory, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
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

absl::Status CudaBackend::CheckSupported(const ir::Graph& graph, const ir::Node& node) const {
  return CudaSupports(graph, node);
}

absl::Status CudaBackend::Prepare(const program::Program& program) {
  RETURN_IF_ERROR(Use());
  for (cudaEvent_t event : handles_->events) cudaEventDestroy(event);
  handles_->events.assign(static_cast<size_t>(program.num_events), nullptr);
  for (cudaEvent_t& event : handles_->events) {
    // Ordering only: no timing, so recording and waiting stay cheap.
    RETURN_IF_ERROR(CheckCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                              "creating a CUDA event"));
  }
  handles_->ops->ClearCounts();
  return absl::OkStatus();
}

absl::Status CudaBackend::PrepareKernel(const KernelCall& call) {
  RETURN_IF_ERROR(Use());
  return Annotate(handles_->ops->Prepare(call),
                  fmt::format("node '{}' ({})", call.node.name, ir::OpName(call.node.op)));
}

std::string CudaBackend::KernelSummary() const { return handles_->ops->Summary(); }

absl::Status CudaBackend::Use() const {
  // The current device is per host thread, and the runtime calls from one
  // thread per stream.
  return CheckCuda(cudaSetDevice(device_), "selecting the CUDA device");
}

absl::Status CudaBackend::RecordEvent(program::Stream stream, program::EventId event) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaEventRecord(handles_->events.at(static_cast<size_t>(event)),
                                   handles_->streams[Index(stream)]),
                   fmt::format("recording event {}", event));
}

absl::Status CudaBackend::WaitEvent(program::Stream stream, program::EventId event) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaStreamWaitEvent(handles_->streams[Index(stream)],
                                       handles_->events.at(static_cast<size_t>(event)), 0),
                   fmt::format("waiting for event {}", event));
}

absl::Status CudaBackend::RunKernel(program::Stream stream, const KernelCall& call) {
  RETURN_IF_ERROR(Use());
  return Annotate(handles_->ops->Run(handles_->streams[Index(stream)], call),
                  fmt::format("node '{}' ({})", call.node.name, ir::OpName(call.node.op)));
}

absl::Status CudaBackend::Copy(program::Stream stream, void* destination, const void* source,
                               int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes),
                                   cudaMemcpyDefault, handles_->streams[Index(stream)]),
                   fmt::format("copying {}", FormatBytes(bytes)));
}

absl::Status CudaBackend::SynchronizeStream(program::Stream stream) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaStreamSynchronize(handles_->streams[Index(stream)]),
                   fmt::format("the {} stream", program::StreamName(stream)));
}

absl::Status CudaBackend::Upload(void* device_destination, const void* host_source, int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaMemcpy(device_destination, host_source, static_cast<size_t>(bytes),
                              cudaMemcpyHostToDevice),
                   fmt::format("uploading {}", FormatBytes(bytes)));
}

absl::Status CudaBackend::Download(void* host_destination, const void* device_source,
                                   int64_t bytes) {
  RETURN_IF_ERROR(Use());
  return CheckCuda(cudaMemcpy(host_destination, device_source, static_cast<size_t>(bytes),
                              cudaMemcpyDeviceToHost),
                   fmt::format("downloading {}", FormatBytes(bytes)));
}

}  // namespace spillway::backends::cuda
