#!/usr/bin/env bash
# scripts/install_deps.sh — installs, from Debian 12's packages, what sixfold builds with, when
# missing. Safe to re-run. Uses sudo when not root. nvcc is not installed here: the CUDA backend
# is built when a CUDA toolkit is already present (see README).
set -euo pipefail
pkgs=(cmake ninja-build g++ make libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev)
missing=()
# The Python package is built in a virtual environment: Debian's python3 needs venv and headers.
if ! python3 -c "import venv, ensurepip" 2>/dev/null; then pkgs+=(python3-venv python3-dev); fi
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "sixfold: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
