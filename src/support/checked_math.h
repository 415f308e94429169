// Integer arithmetic on sizes that reports overflow instead of wrapping.
//
// Every byte count, element count and offset Spillway derives from a shape
// goes through these, so that a huge image or a hostile file gives an error
// that says so rather than a negative size several stages later.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace spillway {

// a + b, or nullopt if it does not fit in int64_t.
constexpr std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// a * b, or nullopt if it does not fit in int64_t.
constexpr std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b for non-negative counts, clamped to the largest int64_t: a running
// total that must stay comparable with a limit after it has passed it.
constexpr int64_t SaturatingAdd(int64_t a, int64_t b) {
  return CheckedAdd(a, b).value_or(std::numeric_limits<int64_t>::max());
}

}  // namespace spillway
