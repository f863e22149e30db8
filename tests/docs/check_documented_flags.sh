#!/bin/bash
# Keeps the user docs honest about vmerge-mpi's options:
#   1. every --flag mentioned in README.md and docs/*.md (dashes normalised to underscores) is
#      an option that `VMERGE --help` lists, unless it belongs to another program (the explicit
#      allow-list below: mpirun, sbatch, srun, lfs, vLLM, ctest, cmake, the project's helper
#      scripts);
#   2. every option `VMERGE --help` lists is documented in docs/usage.md.
# usage: check_documented_flags.sh VMERGE SOURCE_DIR
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 VMERGE SOURCE_DIR" >&2; exit 2; }
vmerge=$1 source_dir=$2

# Options of other programs that the docs mention, already normalised (dashes -> underscores).
foreign=(
    # mpirun (Open MPI, MPICH)
    oversubscribe bind_to map_by mca hostfile np_per_node
    # sbatch / srun / Slurm
    nodes ntasks ntasks_per_node cpus_per_task mem_per_cpu mem time job_name output open_mode
    parsable mpi kill_on_bad_exit pty partition account dependency
    # Megatron-LM (its --save folder; its FP8 training flags, docs/quantization.md)
    save fp8_format fp8_param_gather
    # torchtitan (--model.converters float8, docs/quantization.md)
    model
    # DeepSpeed's zero_to_fp32.py (docs/performance.md's peer runs)
    safe_serialization
    # lfs (Lustre)
    stripe_count stripe_size
    # vLLM (docs/lora.md)
    lora_modules
    # ctest / cmake
    output_on_failure build target preset test_dir install prefix
    # project helper scripts: tests/corpus/make_bad_inputs.py, run_corpus.py, scripts/bench/make_bench_checkpoint.py,
    # scripts/install-deps.sh
    fsdp megatron size_gb world small tests module
    # scripts/bench/make_bench_grouped_experts.py (docs/performance.md, docs/architecture-tables.md)
    experts layers dim
    # scripts/bench/bench_s3.py, bench_s3_output.py
    vmerge np ways checkpoints
    # tests/tools/check_fp8.py (docs/quantization.md)
    scheme
    # tests/structure/check_layering.py (docs/design.md)
    selftest
    # placeholders in quoted error messages ("unrecognised option '--bogus'", "option '--Y'")
    X Y bogus
    # the Hugging Face CLI (hf upload, --hf_upload_path)
    repo_type
    # pip (docs/python.md)
    no_build_isolation config_settings
)

normalise() { sed -e 's/^--//' -e 's/-/_/g'; }

help=$("$vmerge" --help 2>&1) || { echo "FAIL: $vmerge --help exited non-zero"; echo "$help"; exit 1; }
# Option lines of boost's help: "  --name arg", "  -q [ --quiet ]".
mapfile -t help_flags < <(grep -oE '^ +(-[a-zA-Z] \[ )?--[a-z][a-z0-9_]*' <<<"$help" | grep -oE -- '--[a-z0-9_]+' |
    normalise | sort -u)
((${#help_flags[@]} >= 10)) || { echo "FAIL: found only ${#help_flags[@]} options in $vmerge --help"; exit 1; }

docs=("$source_dir/README.md" "$source_dir"/docs/*.md)
status=0

is_in() {  # is_in WORD LIST...
    local word=$1
    shift
    local x
    for x in "$@"; do [[ $x == "$word" ]] && return 0; done
    return 1
}

# 1. Documented flags exist. A flag is "--" not preceded by a letter, digit, "_", "-", "#" or "/"
#    (link anchors such as usage.md#--log_json are not flags), then a letter; "--flag=value"
#    counts as --flag.
checked=0
for doc in "${docs[@]}"; do
    [[ -f $doc ]] || continue
    while IFS=: read -r line flag; do
        name=$(normalise <<<"$flag")
        checked=$((checked + 1))
        is_in "$name" "${help_flags[@]}" && continue
        is_in "$name" "${foreign[@]}" && continue
        echo "FAIL: ${doc#"$source_dir"/}:$line mentions $flag, which is not a vmerge-mpi option" \
            "(not in '$vmerge --help'; if it belongs to another program, add it to the allow-list in $0)"
        status=1
    done < <(grep -noP '(?<![A-Za-z0-9_#/-])--[A-Za-z][A-Za-z0-9_-]*' "$doc" | sed 's/-*$//')
done

# 2. Every --help option is documented in docs/usage.md (either spelling).
usage_doc="$source_dir/docs/usage.md"
if [[ ! -f $usage_doc ]]; then
    echo "FAIL: $usage_doc is missing"
    status=1
else
    mapfile -t usage_flags < <(grep -oP '(?<![A-Za-z0-9_#/-])--[A-Za-z][A-Za-z0-9_-]*' "$usage_doc" | sed 's/-*$//' |
        normalise | sort -u)
    for name in "${help_flags[@]}"; do
        is_in "$name" "${usage_flags[@]}" && continue
        echo "FAIL: --$name is in '$vmerge --help' but not documented in docs/usage.md"
        status=1
    done
fi

if ((status == 0)); then
    echo "ok   ${#help_flags[@]} options in --help, all documented in docs/usage.md;" \
        "$checked flag mentions in ${#docs[@]} files, all real options or allow-listed"
fi
exit $status
