#!/usr/bin/env bash
# Called by `make main` when papermill fails: one line that says what happened, its likely cause and where the log is.
#   scripts/main_failed.sh LOG [PYTHON]
# A kernel that died (papermill's DeadKernelError) is almost always the LLM runtime crashing inside the kernel
# process (SIGILL from instructions this CPU does not allow, or the OOM killer): the one-token smoke run of
# scripts/smoke_llm.py is run again to tell which, and its verdict is printed on the next line.
set -uo pipefail
log="$1"; PY="${2:-.venv/bin/python}"
if grep -q -E 'DeadKernelError|Kernel died' "$log" 2>/dev/null; then
  echo "make main: the notebook's kernel died (likely cause: the local LLM runtime crashed in the kernel, e.g. an" \
       "illegal instruction or out of memory); full log: $log" >&2
  "$PY" "$(dirname "$0")/smoke_llm.py" || true
else
  last=$(grep -v -E '^\s*$' "$log" 2>/dev/null | grep -E 'Error|Exception' | tail -n 1)
  echo "make main: the notebook failed${last:+ (${last:0:300})}; full log: $log" >&2
fi
exit 1
