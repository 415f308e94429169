#include "train/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>

#include "fmt/format.h"
#include "support/check.h"
#include "support/file_io.h"
#include "support/status_macros.h"

namespace spillway::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are little-endian and written with memcpy");

constexpr std::string_view kMagic = "SPILLWAY-CKPT";
constexpr int64_t kMaxRank = 8;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    PutBytes(std::as_bytes(std::span(&value, 1)));
  }
  void PutBytes(std::span<const std::byte> bytes) {
    bytes_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void PutString(std::string_view text) {
    Put(static_cast<uint32_t>(text.size()));
    PutBytes(std::as_bytes(std::span(text.data(), text.size())));
  }
  std::span<const std::byte> bytes() const { return std::as_bytes(std::span(bytes_)); }

 private:
  // A string rather than a vector of bytes: GCC 12 at -O3 reports false
  // overflows when a vector grows by a few bytes at a time.
  std::string bytes_;
};

// Reads fields with bounds checks: running past the end is an error, never a
// read outside the buffer, and no length is trusted before it is checked.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  template <typename T>
  absl::StatusOr<T> Get(std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  absl::StatusOr<std::span<const std::byte>> GetBytes(uint64_t count, std::string_view what) {
    RETURN_IF_ERROR(Need(count, what));
    std::span<const std::byte> result = bytes_.subspan(position_, count);
    position_ += count;
    return result;
  }
  absl::StatusOr<std::string> GetString(std::string_view what) {
    ASSIGN_OR_RETURN(const uint32_t length, Get<uint32_t>(what));
    ASSIGN_OR_RETURN(std::span<const std::byte> text, GetBytes(length, what));
    return std::string(reinterpret_cast<const char*>(text.data()), text.size());
  }
  size_t position() const { return position_; }

 private:
  absl::Status Need(uint64_t count, std::string_view what) const {
    if (count > bytes_.size() - position_) {
      return absl::InvalidArgumentError(
          fmt::format("checkpoint '{}' is truncated or corrupt: it ends at byte {} inside {}",
                      path_, bytes_.size(), what));
    }
    return absl::OkStatus();
  }

  std::span<const std::byte> bytes_;
  const std::string& path_;
  size_t position_ = 0;
};

}  // namespace

uint64_t Fnv1a(std::span<const std::byte> bytes, uint64_t hash) {
  for (std::byte b : bytes) {
    hash ^= static_cast<uint64_t>(b);
    hash *= kFnvPrime;
  }
  return hash;
}

std::vector<ir::ValueId> PersistentValues(const ir::Graph& graph) {
  std::vector<ir::ValueId> values;
  for (ir::ValueId value : graph.inputs()) {
    const ir::ValueKind kind = graph.value(value).kind;
    if (kind == ir::ValueKind::kParameter || kind == ir::ValueKind::kBuffer ||
        kind == ir::ValueKind::kOptimizerState) {
      values.push_back(value);
    }
  }
  std::sort(values.begin(), values.end());
  return values;
}

uint64_t ModelFingerprint(const ir::Graph& graph) {
  Writer description;
  for (ir::ValueId id : PersistentValues(graph)) {
    const ir::Value& value = graph.value(id);
    description.PutString(value.name);
    description.PutString(ir::ValueKindName(value.kind));
    description.PutString(ir::TypeToString(value.type));
  }
  return Fnv1a(description.bytes());
}

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  Writer file;
  file.PutBytes(std::as_bytes(std::span(kMagic.data(), kMagic.size())));
  file.Put(kCheckpointVersion);
  file.Put(checkpoint.fingerprint);
  file.Put(checkpoint.step);
  file.Put(checkpoint.seed);
  file.Put(static_cast<uint32_t>(checkpoint.tensors.size()));
  for (const CheckpointTensor& tensor : checkpoint.tensors) {
    SPILLWAY_CHECK(static_cast<int64_t>(tensor.bytes.size()) == tensor.type.bytes(),
                   "a checkpoint tensor's bytes do not match its type");
    file.PutString(tensor.name);
    file.PutString(ir::ValueKindName(tensor.kind));
    file.PutString(ir::DTypeName(tensor.type.dtype));
    file.Put(static_cast<uint32_t>(tensor.type.rank()));
    for (int64_t dim : tensor.type.shape) file.Put(dim);
    file.Put(static_cast<uint64_t>(tensor.bytes.size()));
    file.PutBytes(tensor.bytes);
  }
  file.Put(Fnv1a(file.bytes()));

  const std::span<const std::byte> bytes = file.bytes();
  return WriteFileAtomically(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      "checkpoint");
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents,
                   ReadFileToString(path, kMaxCheckpointBytes, "checkpoint"));
  return ParseCheckpoint(contents, path);
}

absl::StatusOr<Checkpoint> ParseCheckpoint(std::string_view contents, const std::string& path) {
  const std::span<const std::byte> bytes = std::as_bytes(std::span(contents));

  if (bytes.size() < kMagic.size() ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not a Spillway checkpoint (it does not start with {})", path, kMagic));
  }
  Reader reader(bytes, path);
  RETURN_IF_ERROR(reader.GetBytes(kMagic.size(), "the magic").status());
  ASSIGN_OR_RETURN(const uint32_t version, reader.Get<uint32_t>("the version"));
  if (version != kCheckpointVersion) {
    return absl::InvalidArgumentError(
        fmt::format("checkpoint '{}' has format version {}; this build reads version {}", path,
                    version, kCheckpointVersion));
  }
  Checkpoint checkpoint;
  ASSIGN_OR_RETURN(checkpoint.fingerprint, reader.Get<uint64_t>("the header"));
  ASSIGN_OR_RETURN(checkpoint.step, reader.Get<int64_t>("the header"));
  ASSIGN_OR_RETURN(checkpoint.seed, reader.Get<uint64_t>("the header"));
  ASSIGN_OR_RETURN(const uint32_t count, reader.Get<uint32_t>("the header"));
  const auto corrupt = [&path](std::string_view problem) {
    return absl::InvalidArgumentError(fmt::format("checkpoint '{}' is corrupt: {}", path, problem));
  };
  for (uint32_t i = 0; i < count; ++i) {
    const std::string what = fmt::format("tensor {} of {}", i + 1, count);
    CheckpointTensor tensor;
    ASSIGN_OR_RETURN(tensor.name, reader.GetString(what));
    ASSIGN_OR_RETURN(const std::string kind, reader.GetString(what));
    ASSIGN_OR_RETURN(const std::string dtype, reader.GetString(what));
    const std::optional<ir::ValueKind> parsed_kind = ir::ParseValueKind(kind);
    const std::optional<ir::DType> parsed_dtype = ir::ParseDType(dtype);
    if (!parsed_kind || !parsed_dtype) {
      return corrupt(fmt::format("{} has kind '{}' and dtype '{}'", what, kind, dtype));
    }
    tensor.kind = *parsed_kind;
    tensor.type.dtype = *parsed_dtype;
    ASSIGN_OR_RETURN(const uint32_t rank, reader.Get<uint32_t>(what));
    if (rank > kMaxRank) return corrupt(fmt::format("'{}' has rank {}", tensor.name, rank));
    for (uint32_t d = 0; d < rank; ++d) {
      ASSIGN_OR_RETURN(const int64_t dim, reader.Get<int64_t>(what));
      tensor.type.shape.push_back(dim);
    }
    ASSIGN_OR_RETURN(const uint64_t size, reader.Get<uint64_t>(what));
    const std::optional<int64_t> expected = tensor.type.Bytes();
    if (!expected || static_cast<uint64_t>(*expected) != size) {
      return corrupt(fmt::format("'{}' of type {} holds {} bytes", tensor.name,
                                 ir::TypeToString(tensor.type), size));
    }
    ASSIGN_OR_RETURN(std::span<const std::byte> data, reader.GetBytes(size, what));
    tensor.bytes.assign(data.begin(), data.end());
    checkpoint.tensors.push_back(std::move(tensor));
  }
  const size_t body = reader.position();
  ASSIGN_OR_RETURN(const uint64_t checksum, reader.Get<uint64_t>("the checksum"));
  if (checksum != Fnv1a(bytes.first(body))) {
    return corrupt("the checksum does not match its contents");
  }
  if (reader.position() != bytes.size()) {
    return corrupt(fmt::format("{} bytes follow the checksum", bytes.size() - reader.position()));
  }
  return checkpoint;
}

absl::Status CheckCheckpointMatches(const Checkpoint& checkpoint, const ir::Graph& graph) {
  const std::vector<ir::ValueId> values = PersistentValues(graph);
  const auto mismatch = [&graph](std::string_view problem) {
    return absl::FailedPreconditionError(fmt::format(
        "the checkpoint was saved from another model or optimizer than '{}' with these options: "
        "{}",
        graph.name(), problem));
  };
  for (size_t i = 0; i < values.size(); ++i) {
    const ir::Value& value = graph.value(values[i]);
    if (i >= checkpoint.tensors.size()) {
      return mismatch(fmt::format("it has no '{}' ({} {})", value.name,
                                  ir::ValueKindName(value.kind), ir::TypeToString(value.type)));
    }
    const CheckpointTensor& tensor = checkpoint.tensors[i];
    if (tensor.name != value.name || tensor.kind != value.kind) {
      return mismatch(fmt::format("its tensor {} is {} '{}', where this model has {} '{}'", i + 1,
                                  ir::ValueKindName(tensor.kind), tensor.name,
                                  ir::ValueKindName(value.kind), value.name));
    }
    if (tensor.type.dtype != value.type.dtype || tensor.type.shape != value.type.shape) {
      return mismatch(fmt::format("'{}' is {} in the checkpoint and {} here", value.name,
                                  ir::TypeToString(tensor.type), ir::TypeToString(value.type)));
    }
  }
  if (checkpoint.tensors.size() > values.size()) {
    return mismatch(fmt::format("it has {} tensors, this model {}; the first extra is '{}'",
                                checkpoint.tensors.size(), values.size(),
                                checkpoint.tensors[values.size()].name));
  }
  if (checkpoint.fingerprint != ModelFingerprint(graph)) {
    return mismatch("the fingerprint differs");
  }
  return absl::OkStatus();
}

}  // namespace spillway::train
