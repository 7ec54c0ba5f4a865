#!/usr/bin/env bash
# A CUDA (sm_90: H100, H200) build of llama-cpp-python 0.3.36 made HERE, with no GPU, for experiments/gpu.sh's
# LLAMA_WHEEL: a lease installs it in seconds instead of building it for ~5 of its 15 minutes (gpu.md).
# Needs nvcc (CUDA 13, the GPU image's) and PyPI. This machine's toolkit has no cuBLAS, so NVIDIA's pip wheel of
# it is unpacked beside a folder of links to the toolkit and linked against (not carried: the image has it).
# Left out: FlashAttention's kernels (GGML_CUDA_FA=OFF; llama.cpp then attends with ordinary kernels, and the
# build has fewer heavy files), llava, and VMM (it links libcuda, of which there is no stub here). The CPU part is
# generic x86-64 (GGML_NATIVE=OFF). `gpu_plan.py bundle` then puts libgomp beside its libraries.
# Prints the wheel to carry; a wheel already built is printed again, not rebuilt. About an hour on 2 cores.
# Usage: bash experiments/build_llama_cuda.sh [OUT_DIR]   (default: ~/.cache/lemon/llama-cuda)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${LEMON_HOME:-$HOME/.cache/lemon}/llama-cuda}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
version=0.3.36
wheel="$out/bundled/llama_cpp_python-$version-py3-none-linux_x86_64.whl"
if [ -f "$wheel" ]; then echo "$wheel"; exit 0; fi
[ -x "$cuda/bin/nvcc" ] || { echo "build_llama_cuda: no nvcc under $cuda; set CUDA_HOME to a CUDA 13 toolkit" >&2; exit 2; }
mkdir -p "$out"
pip=(python3 -m pip download -q --no-deps -d "$out")
[ -f "$out/llama_cpp_python-$version.tar.gz" ] || "${pip[@]}" --no-binary :all: "llama-cpp-python==$version"
ls "$out"/nvidia_cublas-13.0.*.whl >/dev/null 2>&1 || "${pip[@]}" --only-binary :all: --python-version 3.12 \
  --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 "nvidia-cublas>=13.0,<13.1"
toolkit="$out/toolkit"  # links to the toolkit; its include/, lib/ and lib64/ as folders that also hold cuBLAS's
rm -rf "$toolkit" "$out/cublas" && mkdir -p "$toolkit" "$out/cublas"
python3 -m zipfile -e "$(ls "$out"/nvidia_cublas-13.0.*.whl | head -1)" "$out/cublas"
for entry in "$cuda"/*; do
  name=$(basename "$entry")
  case "$name" in
    include) extra=("$out"/cublas/nvidia/cu13/include/*) ;;
    lib|lib64) extra=("$out"/cublas/nvidia/cu13/lib/*) ;;
    *) ln -s "$(readlink -f "$entry")" "$toolkit/"; continue ;;
  esac
  mkdir -p "$toolkit/$name"
  for f in "$(readlink -f "$entry")"/* "${extra[@]}"; do ln -sf "$f" "$toolkit/$name/"; done
  if [ "$name" != include ]; then
    ln -sf libcublas.so.13 "$toolkit/$name/libcublas.so"; ln -sf libcublasLt.so.13 "$toolkit/$name/libcublasLt.so"
  fi
done
log="$out/build.log"
CUDACXX="$toolkit/bin/nvcc" CUDAToolkit_ROOT="$toolkit" CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}" \
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF \
-DGGML_CUDA_NCCL=OFF -DGGML_CUDA_NO_VMM=ON -DCUDAToolkit_ROOT=$toolkit" \
  python3 -m pip wheel -v --no-deps -w "$out/built" "$out/llama_cpp_python-$version.tar.gz" > "$log" 2>&1 ||
  { echo "build_llama_cuda: the build failed; see $log" >&2; exit 1; }
python3 "$here/gpu_plan.py" bundle "$out/built/llama_cpp_python-$version-py3-none-linux_x86_64.whl" "$out/bundled"
