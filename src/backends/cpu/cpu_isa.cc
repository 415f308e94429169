#include "backends/cpu/cpu_isa.h"

#include <array>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "dnnl.hpp"
#include "fmt/format.h"

namespace spillway::backends::cpu {
namespace {

constexpr std::array<DirectKernelIsa, 3> kDirectKernelIsas = {
    DirectKernelIsa::kGeneric, DirectKernelIsa::kAvx2, DirectKernelIsa::kAvx512};

// oneDNN's ISA levels by the names ONEDNN_MAX_CPU_ISA takes (its
// documentation, "CPU Dispatcher Control"), narrowest first.
constexpr std::array<std::pair<std::string_view, dnnl::cpu_isa>, 11> kOneDnnIsas = {{
    {"sse41", dnnl::cpu_isa::sse41},
    {"avx", dnnl::cpu_isa::avx},
    {"avx2", dnnl::cpu_isa::avx2},
    {"avx2_vnni", dnnl::cpu_isa::avx2_vnni},
    {"avx512_mic", dnnl::cpu_isa::avx512_mic},
    {"avx512_mic_4ops", dnnl::cpu_isa::avx512_mic_4ops},
    {"avx512_core", dnnl::cpu_isa::avx512_core},
    {"avx512_core_vnni", dnnl::cpu_isa::avx512_core_vnni},
    {"avx512_core_bf16", dnnl::cpu_isa::avx512_core_bf16},
    {"avx512_core_amx", dnnl::cpu_isa::avx512_core_amx},
    {"all", dnnl::cpu_isa::all},
}};

// oneDNN's ISA values are bit sets: a wider ISA has every bit of a narrower
// one it extends.
bool Includes(dnnl::cpu_isa wide, dnnl::cpu_isa narrow) {
  const auto w = static_cast<unsigned>(wide);
  const auto n = static_cast<unsigned>(narrow);
  return (w & n) == n;
}

std::string OneDnnIsaName(dnnl::cpu_isa isa) {
  for (const auto& [name, value] : kOneDnnIsas) {
    if (value == isa) return std::string(name);
  }
  return fmt::format("isa_0x{:x}", static_cast<unsigned>(isa));
}

// The widest direct-kernel build whose instructions oneDNN's ISA includes.
DirectKernelIsa FollowOneDnn() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (Includes(isa, dnnl::cpu_isa::avx512_core) && CanRunDirectKernelIsa(DirectKernelIsa::kAvx512))
    return DirectKernelIsa::kAvx512;
  if (Includes(isa, dnnl::cpu_isa::avx2) && CanRunDirectKernelIsa(DirectKernelIsa::kAvx2))
    return DirectKernelIsa::kAvx2;
  return DirectKernelIsa::kGeneric;
}

}  // namespace

std::string_view DirectKernelIsaName(DirectKernelIsa isa) {
  switch (isa) {
    case DirectKernelIsa::kGeneric:
      return "generic";
    case DirectKernelIsa::kAvx2:
      return "avx2";
    case DirectKernelIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

absl::StatusOr<DirectKernelIsa> ParseDirectKernelIsa(std::string_view name) {
  for (DirectKernelIsa isa : kDirectKernelIsas) {
    if (name == DirectKernelIsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown direct-kernel build '{}' (expected generic, avx2 or avx512)", name));
}

bool CanRunDirectKernelIsa(DirectKernelIsa isa) {
  switch (isa) {
    case DirectKernelIsa::kGeneric:
      return true;
    case DirectKernelIsa::kAvx2:
#ifdef SPILLWAY_DIRECT_KERNELS_X86
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return false;
#endif
    case DirectKernelIsa::kAvx512:
#ifdef SPILLWAY_DIRECT_KERNELS_X86
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
      return false;
#endif
  }
  return false;
}

std::vector<DirectKernelIsa> RunnableDirectKernelIsas() {
  std::vector<DirectKernelIsa> runnable;
  for (DirectKernelIsa isa : kDirectKernelIsas) {
    if (CanRunDirectKernelIsa(isa)) runnable.push_back(isa);
  }
  return runnable;
}

absl::StatusOr<DirectKernelIsa> SelectDirectKernelIsa() {
  const char* forced = std::getenv("SPILLWAY_DIRECT_KERNELS");
  if (forced == nullptr || *forced == '\0') return FollowOneDnn();
  absl::StatusOr<DirectKernelIsa> isa = ParseDirectKernelIsa(forced);
  if (!isa.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("SPILLWAY_DIRECT_KERNELS: {}", std::string(isa.status().message())));
  }
  if (!CanRunDirectKernelIsa(*isa)) {
    return absl::InvalidArgumentError(fmt::format(
        "SPILLWAY_DIRECT_KERNELS={}: this processor cannot run that build (it can run {})", forced,
        absl::StrJoin(RunnableDirectKernelIsas(), ", ", [](std::string* out, DirectKernelIsa i) {
          out->append(DirectKernelIsaName(i));
        })));
  }
  return *isa;
}

absl::Status CheckCpuIsaEnvironment() {
  for (const char* variable : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    const std::string lower = absl::AsciiStrToLower(value);
    bool known = false;
    for (const auto& [name, isa] : kOneDnnIsas) known = known || lower == name;
    if (!known) {
      return absl::InvalidArgumentError(fmt::format(
          "{}={}: not an ISA oneDNN knows (for example SSE41, AVX2, AVX512_CORE or ALL)", variable,
          value));
    }
  }
  return SelectDirectKernelIsa().status();
}

absl::StatusOr<CpuIsaPaths> DescribeCpuIsaPaths() {
  const dnnl_version_t* version = dnnl_version();
  absl::StatusOr<DirectKernelIsa> direct = SelectDirectKernelIsa();
  if (!direct.ok()) return direct.status();
  return CpuIsaPaths{
      .onednn_version = fmt::format("{}.{}.{}", version->major, version->minor, version->patch),
      .onednn_isa = OneDnnIsaName(dnnl::get_effective_cpu_isa()),
      .direct_kernels = std::string(DirectKernelIsaName(*direct)),
  };
}

}  // namespace spillway::backends::cpu
