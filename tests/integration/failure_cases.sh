#!/bin/bash
# Broken inputs must end with a non-zero exit, a message naming the culprit file, and no
# target folder (nor a leftover staging folder) where a user would look for a result.
# usage: failure_cases.sh VMERGE MPIEXEC FIXTURES NP WORK
set -uo pipefail
vmerge=$1 mpiexec=$2 fixtures=$3 np=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
failures=0

expect_failure() {  # name, expected text in the message, local_dir
    local name=$1 expected=$2 local_dir=$3
    local target="$work/out.$name"
    local log="$work/$name.log"
    "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" \
        >"$log" 2>&1
    local rc=$?
    if [[ $rc -eq 0 ]]; then
        echo "FAIL $name: exit 0"; failures=$((failures + 1)); return
    fi
    if ! grep -qF -- "$expected" "$log"; then
        echo "FAIL $name: message does not name '$expected':"; cat "$log"; failures=$((failures + 1)); return
    fi
    if [[ -e "$target" ]] || compgen -G "$work/.out.$name.vmerge-staging*" >/dev/null; then
        echo "FAIL $name: left $target or its staging folder behind"; failures=$((failures + 1)); return
    fi
    echo "ok   $name (exit $rc): $(grep -m1 error "$log")"
}

copy_case() {  # case, destination
    cp -r "$fixtures/$1" "$2"
}

copy_case w2_bf16 "$work/missing_rank"
rm "$work/missing_rank/model_world_size_2_rank_1.pt"
expect_failure missing_rank "model_world_size_2_rank_1.pt" "$work/missing_rank"

copy_case w2_bf16 "$work/truncated"
file="$work/truncated/model_world_size_2_rank_1.pt"
truncate -s $(( $(stat -c %s "$file") / 2 )) "$file"
expect_failure truncated_shard "model_world_size_2_rank_1.pt" "$work/truncated"

copy_case w2_bf16 "$work/truncated_tail"
file="$work/truncated_tail/model_world_size_2_rank_0.pt"
truncate -s $(( $(stat -c %s "$file") - 100 )) "$file"
expect_failure truncated_tail "model_world_size_2_rank_0.pt" "$work/truncated_tail"

# Rank 1 of another model: same keys, but a 63-row embedding where rank 0 has 64 rows.
copy_case keep_fp32_w2 "$work/mismatch"
cp "$fixtures/noncontig_w2/model_world_size_2_rank_1.pt" "$work/mismatch/"
expect_failure mismatched_shapes "model_world_size_2_rank_1.pt" "$work/mismatch"
grep -q "model_world_size_2_rank_0.pt" "$work/mismatched_shapes.log" ||
    { echo "FAIL mismatched_shapes: message does not name both files"; failures=$((failures + 1)); }

copy_case w2_bf16 "$work/wrong_world"
echo '{"FSDP_version": 2, "world_size": 4}' >"$work/wrong_world/fsdp_config.json"
expect_failure wrong_world_size "fsdp_config.json" "$work/wrong_world"

copy_case w2_bf16 "$work/corrupt_pickle"
/usr/bin/python3 - "$work/corrupt_pickle/model_world_size_2_rank_0.pt" <<'PY'
import sys, zipfile
path = sys.argv[1]
with zipfile.ZipFile(path) as z:
    info = z.infolist()[0]
    header = info.header_offset
with open(path, "r+b") as f:
    f.seek(header + 26)
    name_len = int.from_bytes(f.read(2), "little"); extra_len = int.from_bytes(f.read(2), "little")
    f.seek(header + 30 + name_len + extra_len + 2)
    f.write(b"\xff\xff\xff\xff")
PY
expect_failure corrupt_pickle "model_world_size_2_rank_0.pt" "$work/corrupt_pickle"

mkdir -p "$work/existing_target/keep"
"$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$fixtures/w2_bf16" \
    --target_dir "$work/existing_target" >"$work/existing.log" 2>&1
if [[ $? -eq 0 || ! -d "$work/existing_target/keep" ]] || ! grep -q -- "--force" "$work/existing.log"; then
    echo "FAIL existing_target: merged over an existing folder without --force"; failures=$((failures + 1))
else
    echo "ok   existing_target"
fi

if [[ $failures -ne 0 ]]; then
    echo "$failures failure case(s) misbehaved"
    exit 1
fi
rm -rf "$work"
echo "all failure cases behaved"
