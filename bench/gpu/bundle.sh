#!/usr/bin/env bash
# The GPU-check build: spillway and the CUDA backend's tests built here with
# the gpu-check preset (no CPU backend, sm_90, the CUDA runtime linked in) and
# laid out in DIR like a build folder, with the shared libraries they need, so
# that a GPU machine without Spillway's Debian packages runs the device check:
#
#   bench/gpu/bundle.sh [DIR]                        here (default build/gpu-bundle)
#   SPILLWAY_BUILD=DIR bench/gpu/check.sh OUT        there, DIR carried along
#
# DIR/bin holds the stripped binaries and DIR/lib every library ldd finds for
# them but the C and C++ runtimes and the CUDA libraries (cuDNN, cuBLAS, ...)
# that the GPU machine's PyTorch wheels bring; DIR/src/cli/spillway and
# DIR/src/backends/cuda/cuda_test are wrappers that put DIR/lib and those
# wheels' library folders (found with $PYTHON, default python3) on
# LD_LIBRARY_PATH. The bundle is then checked here: no library from outside
# DIR/lib but those, a plan, the CUDA tests (they skip without a GPU), and its
# size, at most 48 MiB. Progress goes to stderr. DIR, like SPILLWAY_BUILD, is
# relative to the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  echo "usage: bench/gpu/bundle.sh [DIR] (try --help)" >&2
  exit 2
}
dir=""
for arg in "$@"; do
  case "$arg" in
    -h | --help)
      sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*) usage ;;
    *) [[ -z "$dir" ]] || usage; dir="$arg" ;;
  esac
done
dir="${dir:-build/gpu-bundle}"
max_mib=48
say() { echo "bundle: $*" >&2; }
fail() {
  echo "bundle.sh: $*" >&2
  exit 1
}

# DIR is emptied first: only a folder this script made (it leaves a marker),
# or an empty one.
marker=.spillway-gpu-bundle
if [[ -e "$dir" && ! -e "$dir/$marker" ]] && [[ -n "$(ls -A "$dir" 2>/dev/null)" || ! -d "$dir" ]]; then
  echo "bundle.sh: $dir exists and is not a bundle; name a new or empty folder" >&2
  exit 2
fi

# The libraries the GPU machine has itself: the C and C++ runtimes (its own
# are newer than Debian 12's; a second libstdc++ could clash with cuDNN's),
# and the CUDA libraries, from the driver or PyTorch's wheels.
system_libs='^(linux-vdso\.so|ld-linux[-a-z0-9_]*\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so)'
cuda_libs='^(libcuda\.so|libcudnn[a-z_]*\.so|libcublas(Lt)?\.so|libcudart\.so|libnvrtc[-a-z_.0-9]*\.so|libnvJitLink\.so|libcufft\.so|libcurand\.so|libcusparse\.so|libcusolver\.so|libnccl\.so)'

say "configuring and building spillway and cuda_test (preset gpu-check)"
cmake --preset gpu-check >/dev/null
cmake --build --preset gpu-check -j "$(nproc)" --target spillway cuda_test >&2
build=build/gpu-check
binaries=(src/cli/spillway src/backends/cuda/cuda_test)

rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
touch "$dir/$marker"
for binary in "${binaries[@]}"; do
  name="$(basename "$binary")"
  strip -o "$dir/bin/$name" "$build/$binary"
  # The wrapper finds the bundle from where it lies, so DIR can be moved.
  mkdir -p "$dir/$(dirname "$binary")"
  up="$(dirname "$binary" | sed 's|[^/]*|..|g')"
  cat > "$dir/$binary" <<EOF
#!/bin/sh
# Written by bench/gpu/bundle.sh: runs bin/$name with the bundle's libraries
# and those of the CUDA wheels of the Python that has PyTorch (\$PYTHON or
# python3), where there is one.
bundle="\$(cd "\$(dirname "\$0")/$up" && pwd)"
wheels="\$("\${PYTHON:-python3}" -c '
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
print(":".join(str(lib) for root in roots for lib in sorted(pathlib.Path(root).glob("*/lib"))))
' 2>/dev/null || true)"
LD_LIBRARY_PATH="\$bundle/lib\${wheels:+:\$wheels}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$bundle/bin/$name" "\$@"
EOF
  chmod +x "$dir/$binary"
done

# Every library ldd resolves, transitive ones included, under the name the
# loader asks for.
say "collecting the shared libraries"
copied=0
while read -r soname path; do
  if [[ "$soname" =~ $system_libs || "$soname" =~ $cuda_libs ]]; then continue; fi
  [[ "$path" == /* ]] || fail "ldd finds no $soname for the binaries here"
  if [[ ! -e "$dir/lib/$soname" ]]; then
    cp -L "$path" "$dir/lib/$soname"
    copied=$((copied + 1))
  fi
done < <(for binary in "${binaries[@]}"; do ldd "$build/$binary"; done |
  awk '$2 == "=>" { print $1, $3 }' | sort -u)
say "$copied libraries in $dir/lib"

# The check: with only DIR/lib on the path, everything resolves to DIR/lib,
# the system set or a CUDA library (those the GPU machine brings may be
# missing here).
say "checking what the binaries resolve to"
for name in spillway cuda_test; do
  while read -r soname path; do
    if [[ "$soname" =~ $cuda_libs || "$soname" =~ $system_libs ]]; then continue; fi
    if [[ "$path" == "not" ]]; then
      fail "$name: $soname is not found with LD_LIBRARY_PATH=$dir/lib"
    fi
    if [[ "$(readlink -f "$path")" != "$(readlink -f "$dir/lib")"/* ]]; then
      fail "$name: $soname resolves to $path, outside $dir/lib"
    fi
  done < <(env -i LD_LIBRARY_PATH="$dir/lib" ldd "$dir/bin/$name" | awk '$2 == "=>" { print $1, $3 }')
done

say "planning ResNet-50 at 224x224 for the H200 through the wrapper"
plan_log="$(mktemp)"
trap 'rm -f "$plan_log"' EXIT
if ! env -i PATH="$PATH" HOME="${HOME:-/tmp}" "$dir/src/cli/spillway" plan --model resnet50 \
  --image 224 --batch 8 --hardware h200-141g-pcie5 --policy hybrid >"$plan_log" 2>&1; then
  tail -20 "$plan_log" >&2
  fail "the bundled spillway failed to plan"
fi
say "$(grep -m1 -i 'step' "$plan_log" || head -1 "$plan_log")"

say "running the CUDA tests through the wrapper (without a GPU they skip)"
if ! env -i PATH="$PATH" HOME="${HOME:-/tmp}" "$dir/src/backends/cuda/cuda_test" >"$plan_log" 2>&1; then
  tail -20 "$plan_log" >&2
  fail "the bundled cuda_test failed"
fi
grep -E '^\[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ tests?' "$plan_log" | sed 's/^/bundle: /' >&2 || true

bytes="$(du -sb "$dir" | cut -f1)"
mib="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
if ((bytes > max_mib * 1048576)); then
  fail "the bundle is $mib MiB, over the $max_mib MiB limit"
fi
say "done: $dir, $mib MiB; on the GPU machine: SPILLWAY_BUILD=$dir bench/gpu/check.sh OUT"
