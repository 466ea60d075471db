#!/usr/bin/env bash
# Install the headless browser that tests/test_docs.py drives (through the PyPI package `playwright`, with
# `executable_path`: playwright's own browser download cannot be reached here), idempotent and quiet.
#   scripts/install_browser.sh
# - Chromium from Debian (`chromium`, 156 on bookworm-security): /usr/bin/chromium. Installed with apt-get
#   (noninteractive, no recommended packages; via sudo when not root) only when `chromium` is missing.
# It prints one line: what it did, or why it could not (no apt-get, no root and no sudo, apt failed).
# It never fails the install that calls it: without Chromium, the browser test skips (and fails under CI=true).
set -uo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "install_browser: chromium already installed ($(command -v chromium))" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: chromium not installed and no apt-get here: install Chromium by hand" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n)
else
  echo "install_browser: chromium not installed and no root or password-less sudo: run 'sudo apt-get install chromium'" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if { "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >"$log" 2>&1 \
     || { "${SUDO[@]}" apt-get update -q >>"$log" 2>&1 \
          && "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium >>"$log" 2>&1; }; }; then
  echo "install_browser: installed chromium ($(command -v chromium))" >&2
else
  echo "install_browser: apt-get install chromium failed; last lines of its log:" \
       "$(tail -n 3 "$log" | tr '\n' ' ')" >&2
fi
rm -f "$log"
exit 0
