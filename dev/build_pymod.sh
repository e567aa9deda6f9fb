#!/usr/bin/env bash
# dev/build_pymod.sh LIB DEST — the sixfold Python package in DEST/sixfold (PYTHONPATH=DEST),
# its extension compiled here with nanobind against LIB, a libsixfold.a built elsewhere from
# this tree (CUDA backend, sm_90a): for a GPU machine where a full build would take too long.
# The sources are compiled in parallel; the CUDA runtime and cuBLAS come from /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:?libsixfold.a} dest=${2:?destination}
nb=$(python3 -c 'import nanobind, os; print(os.path.dirname(nanobind.__file__))')
pyinc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
ext=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
mkdir -p "$dest/sixfold" "$dest/obj"
cp python/sixfold/*.py "$dest/sixfold/"
pids=()
for f in python/bind*.cpp "$nb/src/nb_combined.cpp"; do
  c++ -O2 -std=c++20 -fPIC -fvisibility=hidden -DNDEBUG -Iinclude -Ipython -I"$nb/include" \
    -I"$nb/ext/robin_map/include" -I"$pyinc" -c "$f" -o "$dest/obj/$(basename "$f").o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
c++ -shared -o "$dest/sixfold/_C$ext" "$dest"/obj/*.o "$lib" -L/usr/local/cuda/lib64 -lcudart -lcublas -lgomp
