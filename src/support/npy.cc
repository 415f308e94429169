#include "support/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "support/check.h"
#include "support/file_io.h"
#include "support/status_macros.h"

namespace spillway {

static_assert(std::endian::native == std::endian::little,
              ".npy data is read and written in the host's byte order");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// The header is padded so that the data starts at a multiple of this, as
// NumPy pads it (readers accept any length).
constexpr size_t kDataAlignment = 64;

// The header dict, as NumPy writes it:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

// A parser for the small subset of Python literals the header uses.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Header> Parse() {
    Header header;
    RETURN_IF_ERROR(Expect('{'));
    while (!Consume('}')) {
      ASSIGN_OR_RETURN(const std::string key, String());
      RETURN_IF_ERROR(Expect(':'));
      if (key == "descr") {
        ASSIGN_OR_RETURN(header.descr, String());
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(header.fortran_order, Bool());
      } else if (key == "shape") {
        ASSIGN_OR_RETURN(header.shape, Tuple());
      } else {
        return Error(fmt::format("unknown key '{}'", key));
      }
      if (!Consume(',')) {
        RETURN_IF_ERROR(Expect('}'));
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("text after the dict");
    return header;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status Expect(char c) {
    if (Consume(c)) return absl::OkStatus();
    return Error(fmt::format("expected '{}'", c));
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        fmt::format("malformed header ({} at offset {} of \"{}\")", what, pos_, text_));
  }
  absl::StatusOr<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Error("expected a string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  absl::StatusOr<bool> Bool() {
    SkipSpace();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w = word;
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        return value;
      }
    }
    return Error("expected True or False");
  }
  absl::StatusOr<std::vector<int64_t>> Tuple() {
    RETURN_IF_ERROR(Expect('('));
    std::vector<int64_t> dims;
    while (!Consume(')')) {
      SkipSpace();
      int64_t dim = 0;
      const size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        const int64_t digit = text_[pos_++] - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return Error("dimension too large");
        }
        dim = dim * 10 + digit;
      }
      if (pos_ == start) return Error("expected a dimension");
      dims.push_back(dim);
      if (!Consume(',')) {
        RETURN_IF_ERROR(Expect(')'));
        break;
      }
    }
    return dims;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

uint64_t ReadLittleEndian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

std::optional<NpyDType> ParseDescr(std::string_view descr) {
  if (descr == "<f4") return NpyDType::kF32;
  if (descr == "<i8") return NpyDType::kI64;
  return std::nullopt;
}

std::string_view Descr(NpyDType dtype) { return dtype == NpyDType::kF32 ? "<f4" : "<i8"; }

}  // namespace

std::string_view NpyDTypeName(NpyDType dtype) {
  return dtype == NpyDType::kF32 ? "float32" : "int64";
}

int64_t NpyDTypeSize(NpyDType dtype) { return dtype == NpyDType::kF32 ? 4 : 8; }

absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, std::string_view name) {
  auto error = [&](std::string_view what) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", name, what));
  };
  if (bytes.substr(0, kMagic.size()) != kMagic || bytes.size() < kMagic.size() + 2) {
    return error("not a NumPy .npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(bytes[kMagic.size()]);
  // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one (3
  // allows UTF-8 in the header, which the accepted headers never need).
  if (major < 1 || major > 3) {
    return error(fmt::format(".npy format version {} is not supported (1 to 3 are)", major));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagic.size() + 2 + length_bytes;
  if (bytes.size() < prefix) return error("truncated .npy header");
  const uint64_t header_length = ReadLittleEndian(bytes.substr(kMagic.size() + 2, length_bytes));
  if (bytes.size() - prefix < header_length) return error("truncated .npy header");
  absl::StatusOr<Header> parsed = HeaderParser(bytes.substr(prefix, header_length)).Parse();
  if (!parsed.ok()) return error(StatusMessage(parsed.status()));
  const Header& header = *parsed;
  if (!header.descr || !header.fortran_order || !header.shape) {
    return error("the .npy header lacks 'descr', 'fortran_order' or 'shape'");
  }
  const std::optional<NpyDType> dtype = ParseDescr(*header.descr);
  if (!dtype) {
    return error(fmt::format(
        "holds dtype '{}'; only little-endian float32 ('<f4') and int64 ('<i8') are read "
        "(convert with array.astype(numpy.float32))",
        *header.descr));
  }
  if (*header.fortran_order) {
    return error("is in Fortran order; save a C-order array (numpy.ascontiguousarray(array))");
  }
  NpyArray array{.dtype = *dtype, .shape = *header.shape, .data = {}};
  uint64_t elements = 1;
  for (int64_t dim : array.shape) {
    if (dim != 0 &&
        elements > std::numeric_limits<uint64_t>::max() / 8 / static_cast<uint64_t>(dim)) {
      return error("the shape's element count overflows");
    }
    elements *= static_cast<uint64_t>(dim);
  }
  const uint64_t data_bytes = elements * static_cast<uint64_t>(NpyDTypeSize(*dtype));
  const std::string_view data = bytes.substr(prefix + header_length);
  if (data.size() != data_bytes) {
    return error(fmt::format("shape ({}) of {} needs {} data bytes; the file has {}",
                             fmt::join(array.shape, ", "), NpyDTypeName(*dtype), data_bytes,
                             data.size()));
  }
  array.data.assign(reinterpret_cast<const std::byte*>(data.data()),
                    reinterpret_cast<const std::byte*>(data.data() + data.size()));
  return array;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path, kMaxNpyFileBytes, ".npy file"));
  return ParseNpy(bytes, path);
}

std::string SerializeNpy(NpyDType dtype, std::span<const int64_t> shape,
                         std::span<const std::byte> data) {
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  SPILLWAY_CHECK(elements * NpyDTypeSize(dtype) == static_cast<int64_t>(data.size()),
                 "the data of a .npy array must match its shape");
  // A 1-tuple needs its trailing comma: (5,).
  const std::string dims =
      shape.size() == 1 ? fmt::format("{},", shape[0]) : fmt::format("{}", fmt::join(shape, ", "));
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", Descr(dtype), dims);
  // Pad with spaces and end with a newline so that the data is aligned.
  const size_t prefix = kMagic.size() + 2 + 2;
  const size_t unpadded = prefix + header.size() + 1;
  header.append((kDataAlignment - unpadded % kDataAlignment) % kDataAlignment, ' ');
  header.push_back('\n');
  SPILLWAY_CHECK(header.size() <= 0xffff, "a .npy v1 header fits in 64 KiB");
  std::string bytes(kMagic);
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  return bytes;
}

absl::Status WriteNpyFile(const std::string& path, NpyDType dtype, std::span<const int64_t> shape,
                          std::span<const std::byte> data) {
  return WriteFileAtomically(path, SerializeNpy(dtype, shape, data), ".npy file");
}

}  // namespace spillway
