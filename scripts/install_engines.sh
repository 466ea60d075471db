#!/usr/bin/env bash
# Install the local SPARQL engine that kgqa_nb.kg.endpoints starts for tests and benchmarks, idempotent and quiet.
#   scripts/install_engines.sh
# - Virtuoso Open Source from Debian (`virtuoso-opensource`, 7.2.5 on bookworm): the server binary
#   /usr/bin/virtuoso-t and the SQL client /usr/bin/isql-vt (package virtuoso-opensource-7-bin).
#   Installed with apt-get (noninteractive; via sudo when not root) only when `virtuoso-t` is missing.
#   The package's own service (on ports 1111/8890) is left stopped: kgqa_nb.kg.endpoints.VirtuosoServer runs its
#   own instance, with its own database and ports, in a temporary directory.
# - The Oxigraph server is the PyPI package `oxigraph` (in settings.ini's requirements), installed by pip.
# It prints one line: what it did, or why it could not (no apt-get, no root and no sudo, apt failed).
# It never fails the install that calls it: without Virtuoso, its tests skip (and fail under CI=true).
set -uo pipefail

if command -v virtuoso-t >/dev/null 2>&1; then
  echo "install_engines: virtuoso-t already installed ($(command -v virtuoso-t))" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_engines: virtuoso-t not installed and no apt-get here: install Virtuoso Open Source 7 by hand" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=(sudo -n)
else
  echo "install_engines: virtuoso-t not installed and no root or password-less sudo: run" \
       "'sudo apt-get install virtuoso-opensource'" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# policy-rc.d 101 keeps the package's init script from starting its own server during the install (when we may)
rcd=/usr/sbin/policy-rc.d; made_rcd=0
if [ ! -e "$rcd" ] && "${SUDO[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $rcd && chmod +x $rcd" 2>/dev/null; then
  made_rcd=1
fi
if { "${SUDO[@]}" apt-get install -y -q --no-install-recommends virtuoso-opensource >"$log" 2>&1 \
     || { "${SUDO[@]}" apt-get update -q >>"$log" 2>&1 \
          && "${SUDO[@]}" apt-get install -y -q --no-install-recommends virtuoso-opensource >>"$log" 2>&1; }; }; then
  echo "install_engines: installed virtuoso-opensource ($(command -v virtuoso-t))" >&2
else
  echo "install_engines: apt-get install virtuoso-opensource failed; last lines of its log:" \
       "$(tail -n 3 "$log" | tr '\n' ' ')" >&2
fi
[ "$made_rcd" -eq 1 ] && "${SUDO[@]}" rm -f "$rcd"
rm -f "$log"
exit 0
