#!/usr/bin/env bash
# NVIDIA's CUDA and CUPTI headers, for building the stand-in libcupti the tests record
# against (tests/record/stand_in_cupti.c), and ptxas: from the pinned wheels PyPI
# carries (no CUDA toolkit, no GPU), into DIR; prints the include directories,
# `:`-separated, as OPSCOPE_CUDA_HEADERS takes them (ptxas is in cuda_nvcc/bin).
#
#   tests/cuda-headers.sh DIR [PIP]
set -euo pipefail
dir="$1"
pip="${2:-pip}"
# cupti_activity.h and libcupti's version (CUPTI_API_VERSION 28); cuda.h and the
# runtime's types; crt/host_defines.h, which the runtime's headers include, ships with
# nvcc's wheel.
wheels=(
    "nvidia-cuda-cupti-cu12==12.9.79"
    "nvidia-cuda-runtime-cu12==12.9.79"
    "nvidia-cuda-nvcc-cu12==12.9.86"
)
stamp="$dir/.wheels"
# (The stamp names what is kept, so that a cache from before ptxas was kept is redone.)
if [ "$(cat "$stamp" 2>/dev/null)" != "${wheels[*]} ptxas" ]; then
    rm -rf "$dir"
    mkdir -p "$dir/wheels"
    "$pip" download --quiet --disable-pip-version-check --no-deps -d "$dir/wheels" "${wheels[@]}" >&2
    for wheel in "$dir"/wheels/*.whl; do
        python3 -m zipfile -e "$wheel" "$dir/unpacked" >&2
    done
    # Only the headers are kept (the wheels hold libraries of ~100 MB), and ptxas, which
    # checks the GPU check's PTX (bench/gpu/check.sh --stand-in).
    for part in cuda_cupti cuda_runtime cuda_nvcc; do
        mkdir -p "$dir/$part"
        cp -r "$dir/unpacked/nvidia/$part/include" "$dir/$part/"
    done
    mkdir -p "$dir/cuda_nvcc/bin"
    cp "$dir/unpacked/nvidia/cuda_nvcc/bin/ptxas" "$dir/cuda_nvcc/bin/"
    chmod +x "$dir/cuda_nvcc/bin/ptxas"
    rm -rf "$dir/unpacked" "$dir/wheels"
    echo "${wheels[*]} ptxas" > "$stamp"
fi
echo "$dir/cuda_cupti/include:$dir/cuda_runtime/include:$dir/cuda_nvcc/include"
