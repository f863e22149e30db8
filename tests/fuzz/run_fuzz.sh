#!/bin/bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and runs each for SECONDS
# seconds, all four at once, starting from tests/fuzz/seeds/<target>/ (new inputs go to
# build-fuzz/corpus/<target>/). Fails when any target crashes, leaks, times out or hits a
# sanitizer report; the input that did it is left as build-fuzz/artifacts/<target>-*.
# usage: tests/fuzz/run_fuzz.sh SECONDS [TARGET...]
set -uo pipefail
seconds=${1:?usage: run_fuzz.sh SECONDS [TARGET...]}
shift
cd "$(dirname "$0")/../.."
root=$PWD
build=$root/build-fuzz
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(zip pickle safetensors torch_scan dcp_metadata scan_message)

CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMERGE_FUZZ=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DVMERGE_BUILD_TESTS=OFF >/dev/null || exit 1
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null || exit 1

mkdir -p "$build/logs" "$build/artifacts"
pids=()
for t in "${targets[@]}"; do
    mkdir -p "$build/corpus/$t"
    "$build/tests/fuzz/fuzz_$t" "$build/corpus/$t" "$root/tests/fuzz/seeds/$t" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" >"$build/logs/$t.log" 2>&1 &
    pids+=($!)
done
failures=0
for i in "${!targets[@]}"; do
    t=${targets[$i]}
    wait "${pids[$i]}"
    rc=$?
    log=$build/logs/$t.log
    done_line=$(grep -E '^#[0-9]+ +DONE' "$log" | tail -1)
    [[ -n $done_line ]] || done_line=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    corpus=$(find "$build/corpus/$t" -type f | wc -l)
    if [[ $rc -ne 0 ]]; then
        echo "FAIL fuzz_$t (exit $rc), see $log:"
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -5
        failures=$((failures + 1))
    else
        echo "ok   fuzz_$t: ${execs:-?} executions, $corpus new corpus files; $done_line"
    fi
done
exit $((failures != 0))
