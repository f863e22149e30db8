#!/bin/bash
# `map` on checkpoints the real producers wrote (the ecosystem cases, tests/ecosystem/README.md):
# the base model is the producer's own live tensors (the case's oracle/weights.safetensors beside
# its config.json), so every match is at distance 0 and the runner-ups are the producer's other
# tensors. The learned table must merge the checkpoint bit for bit to those tensors (torchtitan
# Llama3, Qwen3-MoE and DeepSeek-V3, whose MTP layer mtp_layers.0 is HF layer 2: a layer_offset;
# megatron-core torch_dist, and its legacy tp 2 x pp 2 save: tp rules learned from the pieces;
# torchtitan GPT-OSS, its experts stored [E, out, in]: transform transpose, its zero
# expert_bias_E dropped).
# usage: learned_map_ecosystem.sh VMERGE PYTHON ECO_CASES WORK
set -euo pipefail
vmerge=$1 python=$2 cases=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
field() { "$python" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(" ".join(v) if isinstance(v, list) else v)' \
    "$cases/$1/case.json" "$2"; }
for case in torchtitan_llama3 torchtitan_qwen3_moe megatron_tp2pp2_torch_dist megatron_tp2pp2_legacy torchtitan_deepseek_v3 torchtitan_gpt_oss; do
    echo "== $case"
    dir="$cases/$case"
    base="$work/$case/base"
    mkdir -p "$base"
    cp "$dir/$(field "$case" hf_config)/config.json" "$base/config.json"
    cp "$dir/oracle/weights.safetensors" "$base/model.safetensors"
    table="$work/$case/table.json"
    read -r -a merge_args <<<"$(field "$case" merge_args)"
    "$vmerge" map --local_dir "$dir/$(field "$case" checkpoint)" --base "$base" --out "$table" "${merge_args[@]}"
    "$vmerge" test --local_dir "$dir/$(field "$case" checkpoint)" --hf_config "$dir/$(field "$case" hf_config)" \
        --test_hf_dir "$base" --architecture_table "$table" "${merge_args[@]}"
done
echo "learned map on the producers' checkpoints: ok"
