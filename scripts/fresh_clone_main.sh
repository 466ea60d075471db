#!/usr/bin/env bash
# Times `make install` and `make main` on a fresh clone of this repository's HEAD, with no ../shared beside it and
# empty caches, and writes the log that README's "The two commands in detail" quotes (outputs/fresh_clone/make_main.log).
# Usage: bash scripts/fresh_clone_main.sh [LOG] [NOTE]   (NOTE: one line on what else the machine was doing)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
log=${1:-$repo/outputs/fresh_clone/make_main.log}
note=${2:-}
work=$(mktemp -d)
clone=$work/kgqa
git clone -q "$repo" "$clone"
cd "$clone"
export KGQA_CACHE=$work/cache KGQA_WHEEL_CACHE=$work/wheels PIP_NO_CACHE_DIR=1
unset KGQA_DATA CI
tmp=$work/raw.log
{
  echo '# make main on a fresh clone'
  echo "commit: $(git rev-parse --short HEAD)   date: $(date -u '+%Y-%m-%d %H:%M') UTC"
  echo "machine: $(nproc) CPU cores, $(free -g | awk '/Mem:/{print $2}') GB RAM, no GPU${note:+; $note}"
  echo 'set-up: git clone (paths below: <clone>), no ../shared beside it, KGQA_CACHE empty, KGQA_WHEEL_CACHE empty, PIP_NO_CACHE_DIR=1'
  echo
  t0=$(date +%s); make install > "$work/install.log" 2>&1; rc=$?; t1=$(date +%s)
  echo "make install: exit $rc, $((t1 - t0)) s"
  grep -E '^building llama-cpp-python|^LLM smoke run' "$work/install.log"
  lib=$(ls .venv/lib/python3*/site-packages/llama_cpp/lib/libggml-cpu.so 2>/dev/null | head -1)
  [ -n "$lib" ] && echo "objdump -d <clone>/${lib#./} | grep -c tilezero: $(objdump -d "$lib" | grep -c tilezero)"
  make main 2>&1; rc=$?; t2=$(date +%s)
  echo
  echo "make main (after install): exit $rc, $((t2 - t1)) s; both: $((t2 - t0)) s"
} > "$tmp"
sed "s#$clone#<clone>#g; s#$work/cache#\$KGQA_CACHE#g" "$tmp" > "$log"
echo "wrote $log ($(wc -l < "$log") lines); clone in $clone"
