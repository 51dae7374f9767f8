#!/usr/bin/env bash
# Installs the build tree into a scratch DESTDIR and builds an application
# against the installed files only, once with pkg-config and once with
# find_package(zcopy), then runs it with the installed component: proof that
# `cmake --install`, zcopy.pc and zcopyConfig.cmake are usable as documented.
set -euo pipefail
build=$1 source=$2
dest=$(mktemp -d -t zcopy-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT

DESTDIR=$dest cmake --install "$build" >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
compdir=$(sed -n 's/^ZCOPY_OMPI_COMPONENT_DIR:PATH=//p' "$build/CMakeCache.txt")
root=$dest$prefix
libdir=$(dirname "$(find "$root" -name 'libzcopy.so' | head -n1)")
test -f "$dest$compdir/mca_coll_zcopy.so"
test -f "$dest$compdir/mca_mpool_zcopy.so"
test -f "$root/include/mpix_zcopy.h" && test -f "$root/include/zcopy/mem.h"

# The installed files name their final prefix; DESTDIR moves them, so
# point the tools at the moved copies.
export PKG_CONFIG_PATH=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_MCA_mca_base_component_path=SYS_DEFAULT:$dest$compdir

work=$dest/app
mkdir -p "$work"
cp "$source/examples/workflow.c" "$work/app.c"
# shellcheck disable=SC2046
mpicc -o "$work/app-pc" "$work/app.c" $(pkg-config --cflags --libs zcopy)

cat >"$work/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(app C)
find_package(zcopy REQUIRED)
add_executable(app-cmake app.c)
target_link_libraries(app-cmake PRIVATE zcopy::zcopy)
CMAKE
cmake -S "$work" -B "$work/build" -DCMAKE_PREFIX_PATH="$root" >/dev/null
cmake --build "$work/build" >/dev/null

for app in "$work/app-pc" "$work/build/app-cmake"; do
  out=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$app")
  echo "$(basename "$app"): $out"
  # The installed component must have run the collectives zero-copy.
  grep -Eq 'correct; zero-copy calls [1-9]' <<<"$out"
done
# The installed Python module and example, on MPI_Alloc_mem memory from
# the installed mpool component. (The module's recorded library path is the
# final prefix; under DESTDIR it finds the library by soname.)
pydir=$(sed -n 's/^ZCOPY_PYTHON_DIR:STRING=//p' "$build/CMakeCache.txt")
python=$(sed -n 's/^ZCOPY_PYTHON3:FILEPATH=//p' "$build/CMakeCache.txt")
if [[ -n $pydir && -n $python ]]; then
  test -f "$root/$pydir/zcopy/__init__.py"
  out=$(PYTHONPATH=$root/$pydir mpirun --allow-run-as-root --oversubscribe \
        -x PYTHONPATH -np 2 "$python" \
        "$root/share/zcopy/examples/train_data_parallel.py" --steps 5 --check)
  echo "train_data_parallel.py: ${out##*$'\n'}"
  grep -q 'results match the serial computation' <<<"$out"
fi
echo "1 passed, 0 failed"
