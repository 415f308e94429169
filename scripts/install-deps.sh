#!/usr/bin/env bash
# Installs the Debian 12 packages Spillway builds and tests with. Idempotent:
# packages already present are left alone and apt is not touched at all.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  # Caches compiles across configurations: the gpu-bundle stage recompiles
  # the release stage's sources with the same flags (docs/testing.md).
  ccache
  libabsl-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev coinor-libcbc-dev zlib1g-dev libpng-dev libjpeg-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  clang-format clang-tidy
  clang libclang-rt-14-dev
  valgrind
  librsvg2-bin
  # The Python module (src/python) and its tests.
  pybind11-dev python3-dev python3-numpy python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
