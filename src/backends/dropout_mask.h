// The random stream of dropout: whether element `index` survives is a pure
// function of the node's seed, the training step and the index (a
// counter-based generator, SplitMix64's finaliser), so recomputing a dropout
// or running its backward op replays the forward's mask exactly, on any
// backend and in any order. The CUDA backend's kernels use this same class
// on the device.
#pragma once

#include <cstdint>

#include "support/host_device.h"

namespace spillway::backends {

SPILLWAY_HOST_DEVICE constexpr uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The mask of one (seed, step): element i is kept with probability 1 - p.
class DropoutMask {
 public:
  SPILLWAY_HOST_DEVICE DropoutMask(uint64_t seed, uint64_t step, double p)
      : key_(Mix64(seed ^ Mix64(step))),
        threshold_(static_cast<uint32_t>(p * static_cast<double>(1u << kBits))) {}

  SPILLWAY_HOST_DEVICE bool Keeps(uint64_t index) const {
    return static_cast<uint32_t>(Mix64(key_ + index) >> (64 - kBits)) >= threshold_;
  }

 private:
  static constexpr int kBits = 24;  // p is resolved to 2^-24
  uint64_t key_;
  uint32_t threshold_;
};

}  // namespace spillway::backends
