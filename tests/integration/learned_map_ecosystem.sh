#!/bin/bash
# `map` on checkpoints the real producers wrote (the ecosystem cases, tests/ecosystem/README.md):
# the base model is the producer's own live tensors (the case's oracle/weights.safetensors beside
# its config.json), so every match is at distance 0 and the runner-ups are the producer's other
# tensors. The learned table must merge the checkpoint bit for bit to those tensors (torchtitan
# Llama3, Qwen3-MoE and DeepSeek-V3, whose MTP layer mtp_layers.0 is HF layer 2: a layer_offset;
# megatron-core torch_dist, and its legacy tp 2 x pp 2 save: tp rules learned from the pieces;
# torchtitan GPT-OSS, its experts stored [E, out, in]: transform transpose, its zero
# expert_bias_E dropped; mbridge's Qwen2.5-VL and Megatron-Bridge's Qwen3-VL, torch_dist and legacy
# tp 2 x pp 2: the vision tower's per-head qkv stated as split qkv_per_head, its merger's
# Sequential indices mlp.0 / mlp.2 kept in the names; Megatron-Bridge's Qwen3-VL-MoE, tp 2 x pp 2
# and pp 2 x ep 2, torch_dist and legacy: each expert's linear_fc1 / linear_fc2 matched to its
# slice of transformers' stacked mlp.experts.gate_up_proj / down_proj, stated as stack_experts). Where vmerge ships a table for the
# checkpoint (the VL cases), the learned table must also merge byte for byte as the shipped one.
# Last, a renamed fork of the legacy Qwen2.5-VL save (invented module names, the producer's values)
# is learned and merged bit for bit to the producer's tensors.
# usage: learned_map_ecosystem.sh VMERGE PYTHON ECO_CASES WORK
set -euo pipefail
vmerge=$1 python=$2 cases=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
field() { "$python" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(" ".join(v) if isinstance(v, list) else v)' \
    "$cases/$1/case.json" "$2"; }
shipped_table_cases=" megatron_qwen2_5_vl_tp2pp2 megatron_qwen2_5_vl_tp2pp2_legacy megatron_qwen3_vl_tp2pp2 megatron_qwen3_vl_tp2pp2_legacy 
    megatron_qwen3_vl_moe_tp2pp2 megatron_qwen3_vl_moe_tp2pp2_legacy megatron_qwen3_vl_moe_pp2ep2 megatron_qwen3_vl_moe_pp2ep2_legacy "
for case in torchtitan_llama3 torchtitan_qwen3_moe megatron_tp2pp2_torch_dist megatron_tp2pp2_legacy torchtitan_deepseek_v3 \
    torchtitan_gpt_oss $shipped_table_cases; do
    echo "== $case"
    dir="$cases/$case"
    checkpoint="$dir/$(field "$case" checkpoint)"
    base="$work/$case/base"
    mkdir -p "$base"
    # config.json: the case's hf_config folder, else verl's huggingface/ beside the checkpoint.
    config_args=()
    if "$python" -c 'import json,sys; sys.exit(0 if "hf_config" in json.load(open(sys.argv[1])) else 1)' "$dir/case.json"; then
        config_args=(--hf_config "$dir/$(field "$case" hf_config)")
        cp "$dir/$(field "$case" hf_config)/config.json" "$base/config.json"
    else
        cp "$checkpoint/huggingface/config.json" "$base/config.json"
    fi
    cp "$dir/oracle/weights.safetensors" "$base/model.safetensors"
    table="$work/$case/table.json"
    read -r -a merge_args <<<"$(field "$case" merge_args)"
    "$vmerge" map --local_dir "$checkpoint" --base "$base" --out "$table" "${merge_args[@]}" "${config_args[@]}"
    "$vmerge" test --local_dir "$checkpoint" "${config_args[@]}" --test_hf_dir "$base" --architecture_table "$table" \
        "${merge_args[@]}"
    if [[ $shipped_table_cases == *" $case "* ]]; then
        "$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/$case/learned" --architecture_table "$table" \
            "${merge_args[@]}" "${config_args[@]}" --quiet
        "$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/$case/shipped" "${merge_args[@]}" "${config_args[@]}" --quiet
        for f in "$work/$case/shipped"/*.safetensors; do cmp "$f" "$work/$case/learned/$(basename "$f")"; done
        echo "$case: the learned table merges byte for byte as the shipped one"
        rm -rf "$work/$case/learned" "$work/$case/shipped"
    fi
done
# A renamed fork of a VL model: the legacy Qwen2.5-VL save with its vision tower's and text layers'
# modules under invented names (tests/ecosystem/fork_legacy_megatron.py), the producer's values.
case=megatron_qwen2_5_vl_tp2pp2_legacy
echo "== renamed fork of $case"
fork="$work/fork_$case"
"$python" "$(dirname "$0")/../ecosystem/fork_legacy_megatron.py" "$cases/$case/$(field "$case" checkpoint)" "$fork/actor"
"$vmerge" map --local_dir "$fork/actor" --base "$work/$case/base" --out "$fork/table.json" --backend megatron
grep -q '"from": "vit.blocks.{i}.attn.fused_in.weight"' "$fork/table.json"
"$vmerge" test --local_dir "$fork/actor" --test_hf_dir "$work/$case/base" --architecture_table "$fork/table.json" \
    --backend megatron
echo "learned map on the producers' checkpoints: ok"
