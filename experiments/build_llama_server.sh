#!/usr/bin/env bash
# llama.cpp's own `llama-server`, built from the sources that llama-cpp-python 0.3.36 vendors (the same llama.cpp
# as the embedded workers), for LEMON_LLAMA_SERVER: worker servers with continuous batching, which
# llama_cpp.server lacks (P4 in docs/results.md: 8 requests in flight batch into one decode). Idempotent: a
# working build is kept and its path printed at once. A new build takes ~10 minutes on 2 cores and needs cmake,
# a C++ compiler and the sdist from PyPI (pip's cache serves it a second time).
#
#   bash experiments/build_llama_server.sh [PREFIX]   # default PREFIX: ~/.cache/lemon-llama-server/0.3.36
#   export LEMON_LLAMA_SERVER="$(bash experiments/build_llama_server.sh)"   # then lemon serve / --serve-workers
#
# The prefix is not under LEMON_HOME on purpose: tests and experiments point LEMON_HOME elsewhere, and one build
# serves them all. GGML_NATIVE=OFF as for llama-cpp-python (README: the native build segfaulted on AMX).
set -euo pipefail
version=0.3.36
prefix="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/lemon-llama-server/$version}"
bin="$prefix/bin/llama-server"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then echo "$bin"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
cmake -S "$work/llama_cpp_python-$version/vendor/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$prefix/bin"
cp "$work/build/bin/llama-server" "$bin.tmp"
mv "$bin.tmp" "$bin"  # atomic: a build cut short never leaves a half-written binary that passes the check
echo "$bin"
