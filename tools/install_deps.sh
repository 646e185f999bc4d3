#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test (list: .ci/packages.txt).
# A line "PACKAGE COMMAND" counts as installed when COMMAND is on PATH: Node.js from another
# source (NodeSource's nodejs bundles npm) conflicts with Debian's npm package.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
while read -r pkg cmd _; do
  [ -n "$pkg" ] || continue
  if [ -n "${cmd:-}" ] && command -v "$cmd" >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < <(sed -e 's/#.*//' -e '/^\s*$/d' .ci/packages.txt | sort -u)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
