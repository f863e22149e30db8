#!/bin/bash
# Stands in for mpiexec in a build without MPI (-DVMERGE_MPI=OFF, tests/CMakeLists.txt): the
# integration scripts launch `MPIEXEC --oversubscribe -np N PROGRAM ARGS...`; with N = 1 this runs
# PROGRAM ARGS as the one process it is, and any other N is an error, so a test that needs ranks
# cannot pass by running one process N times.
#   one_process_launch.sh [--oversubscribe] -np|-n N PROGRAM [ARGS...]
set -euo pipefail
np=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --oversubscribe) shift ;;
        -np|-n) np=$2; shift 2 ;;
        -*) echo "one_process_launch.sh: unexpected launcher option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [[ $np != 1 ]]; then
    echo "one_process_launch.sh: -np $np: this build has no MPI (-DVMERGE_MPI=OFF) and runs one process" >&2
    exit 2
fi
exec "$@"
