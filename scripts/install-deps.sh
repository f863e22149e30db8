#!/bin/bash
# Installs the Debian 12 or 13 packages vmerge needs: `install-deps.sh` for building and running,
# `install-deps.sh --tests` adds what the tests use (torch 1.13 for the fixture generator, Slurm
# and munge for the job-template test, h5py and zstd for the HDF5 archive tests).
set -euo pipefail
packages=(cmake g++ make libopenmpi-dev openmpi-bin nlohmann-json3-dev libboost-program-options-dev)
# --format hdf5: parallel HDF5 (Open MPI build) and libzstd for the filter 32015 (docs/hdf5.md);
# pkg-config finds a libzstd that has no CMake config.
packages+=(libhdf5-openmpi-dev libzstd-dev pkg-config)
# libdeflate + zlib: CRC-32 of the ZIP records of torch.save files (src/io/record_crc.cpp).
packages+=(libdeflate-dev zlib1g-dev)
# libxxhash: the XXH64 of every written block (the resume journal, vmerge.checksums.json).
packages+=(libxxhash-dev)
# RE2: linear-time regular expressions for every pattern matched against input text.
packages+=(libre2-dev)
# s3:// inputs: libcurl (HTTP + SigV4 signing), expat (the store's XML), OpenSSL (SHA-256).
packages+=(libcurl4-openssl-dev libexpat1-dev libssl-dev)
if [[ ${1:-} == --tests ]]; then
    packages+=(libgtest-dev python3-torch python3-numpy)
    # tests/tools/check_hdf5_archive.py: h5py reads the archive, an independent zstd its chunks;
    # h5dump (hdf5-tools) prints a compressed dataset through the plugin.
    packages+=(python3-h5py python3-zstandard zstd hdf5-tools)
    # tests/slurm: a private single-node Slurm (slurmctld, slurmd, sbatch/srun) with munge.
    packages+=(slurmctld slurmd slurm-client munge)
    # tests/fuzz: libFuzzer targets built with Debian's clang, whose runtime package carries the
    # default clang's version: 14 in Debian 12, 19 in Debian 13.
    case $(. /etc/os-release && echo "${VERSION_ID:-}") in
        12) packages+=(clang libclang-rt-14-dev) ;;
        *) packages+=(clang libclang-rt-19-dev) ;;
    esac
    # The ecosystem tests' virtual environments (tests/ecosystem/setup_venv.sh).
    packages+=(python3-venv)
    # ccache: scripts/run-tests.sh's builds share their objects (the pip build reuses the main one's).
    packages+=(ccache)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
