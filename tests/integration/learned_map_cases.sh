#!/bin/bash
# Every case of make_learned_map_fixtures.py: `map` learns the table from the checkpoint and its
# base model (with 1 and 2 ranks sharing the comparisons, the same table), a merge with the learned table matches the
# fine-tuned tensors the producer wrote bit for bit (1 and 2 ranks), and, where vmerge ships a
# table for the layout, writes the same bytes as a merge with the shipped table; an ambiguous
# base is refused (3 ranks: exit 1, the tensors named, no table written). `inspect --suggest_table`
# proposes the same table (its --out and --json), and refuses alike.
# usage: learned_map_cases.sh VMERGE MPIEXEC PYTHON FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 fixtures=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
field() { "$python" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]]; print("" if v is None else v)' \
    "$fixtures/cases.json" "$1" "$2"; }
cases=$("$python" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$fixtures/cases.json")
for case in $cases; do
    local_dir="$fixtures/$(field "$case" local_dir)"
    base="$fixtures/$(field "$case" base)"
    error=$(field "$case" error)
    table="$work/$case.json"
    echo "== $case"
    if [[ -n $error ]]; then
        status=0
        "$mpiexec" --oversubscribe -np 3 "$vmerge" map --local_dir "$local_dir" --base "$base" --out "$table" \
            >"$work/$case.out" 2>&1 || status=$?
        cat "$work/$case.out"
        [[ $status == 1 ]] || { echo "FAIL: map exited $status, expected 1"; exit 1; }
        grep -q "refused: .*$error" "$work/$case.out" || { echo "FAIL: no refusal naming $error"; exit 1; }
        [[ ! -e $table ]] || { echo "FAIL: a refused map wrote $table"; exit 1; }
        status=0
        "$vmerge" inspect --suggest_table --json --local_dir "$local_dir" --base "$base" >"$work/$case.inspect.json" \
            || status=$?
        [[ $status == 1 ]] || { echo "FAIL: inspect --suggest_table exited $status, expected 1"; exit 1; }
        "$python" - "$work/$case.inspect.json" "$error" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["suggested_table"] is None, "a refused inspect --suggest_table proposed a table"
assert any(sys.argv[2] in why for why in doc["refused"]), doc["refused"]
PY
        continue
    fi
    "$vmerge" map --local_dir "$local_dir" --base "$base" --out "$table"
    "$mpiexec" --oversubscribe -np 2 "$vmerge" map --local_dir "$local_dir" --base "$base" --out "$work/$case.np2.json" --quiet
    cmp "$table" "$work/$case.np2.json"
    # inspect --suggest_table: map's path, the same table (written by --out, and in its --json).
    "$vmerge" inspect --suggest_table --json --local_dir "$local_dir" --base "$base" --out "$work/$case.inspect-table.json" \
        >"$work/$case.inspect.json"
    cmp "$table" "$work/$case.inspect-table.json"
    "$python" - "$work/$case.inspect.json" "$table" <<'PY'
import json, sys
doc, table = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert doc["suggested_table"] == table, "inspect --suggest_table --json differs from map's table"
assert doc["refused"] == [] and len(doc["rules"]) == len(table["rules"]), doc
assert all("worst_distance" in r for r in doc["rules"] if "to" in r and r["layout"] != "tied head"), doc["rules"]
PY
    reference="$fixtures/$(field "$case" reference)"
    for np in 1 2; do
        "$mpiexec" --oversubscribe -np "$np" "$vmerge" test --local_dir "$local_dir" --hf_config "$base" \
            --test_hf_dir "$reference" --architecture_table "$table" --quiet
    done
    if [[ $(field "$case" shipped) == True ]]; then
        "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$local_dir" --hf_config "$base" \
            --target_dir "$work/$case.learned" --architecture_table "$table" --quiet
        "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$local_dir" --hf_config "$base" \
            --target_dir "$work/$case.shipped" --quiet
        for f in "$work/$case.shipped"/*.safetensors; do cmp "$f" "$work/$case.learned/$(basename "$f")"; done
        echo "$case: the learned table merges byte for byte as the shipped one"
        rm -rf "$work/$case.learned" "$work/$case.shipped"
    fi
done
echo "learned map cases: ok"
