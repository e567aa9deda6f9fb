#!/usr/bin/env bash
# scripts/test.sh — set up, build and run every test (the README's test command; CI runs it):
# the C++ suites through CTest, then `pip install .` into a virtual environment and the Python
# tests. Builds the CUDA backend too when nvcc is present; GPU tests skip where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default

venv=build/pyvenv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check numpy pytest
"$venv/bin/python" -m pip install -q --disable-pip-version-check .
(cd python/tests && ../../"$venv"/bin/python -m pytest -q .)
