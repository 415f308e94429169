// Counter-based random numbers for the trainer: every number is a pure
// function of a key and an index, so parameter initialization and synthetic
// data give the same bytes on every machine, in any order, and a resumed run
// draws exactly what an uninterrupted one would. Only integer arithmetic and
// one exactly rounded float division: no standard-library distribution, whose
// output the C++ standard leaves to the implementation.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "backends/dropout_mask.h"

namespace spillway::train {

// A key for one stream of numbers, from a seed and the parts that name the
// stream (a value id, a step, a sample...).
inline uint64_t StreamKey(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t key = backends::Mix64(seed);
  for (uint64_t part : parts) key = backends::Mix64(key ^ part);
  return key;
}

class RandomStream {
 public:
  explicit RandomStream(uint64_t key) : key_(key) {}

  uint64_t Bits(uint64_t index) const { return backends::Mix64(key_ + backends::Mix64(index)); }

  // Uniform in [0, 1), with 24 random bits: exactly representable in float.
  float Unit(uint64_t index) const {
    return static_cast<float>(Bits(index) >> 40) * (1.0f / 16777216.0f);
  }

  // Uniform in [low, high).
  float Uniform(uint64_t index, float low, float high) const {
    return low + (high - low) * Unit(index);
  }

  // Uniform in [0, n).
  uint64_t Below(uint64_t index, uint64_t n) const { return Bits(index) % n; }

 private:
  uint64_t key_;
};

}  // namespace spillway::train
