#!/usr/bin/env bash
# Installs the Debian 12 packages zcopy needs to build, test and benchmark.
# Idempotent: when everything is present it prints nothing and touches nothing.
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    only report what is missing (exit 1 if any)
set -euo pipefail

packages=(
  libopenmpi-dev openmpi-bin   # Open MPI 4.1 with its internal headers
  libucx-dev                   # transfers between servers
  libhwloc-dev                 # topology
  cmake gcc libc6-dev make pkg-config  # build (cmake >= 3.25: workflow presets)
  valgrind                     # memory checks in the test suite
  gnuplot-nox                  # bench plots
  iproute2 util-linux          # the emulated cluster (ip; unshare, nsenter, taskset)
  python3-mpi4py python3-numpy # the Python module (python/zcopy), its tests
                               # and examples/train_data_parallel.py
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done

[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ ${1:-} == --check ]]; then
  echo "missing: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
echo "install-deps: done" >&2
