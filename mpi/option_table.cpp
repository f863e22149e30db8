// The command line's option table (docs/usage.md): every flag once, in groups, each bound to the
// field of the stage options it sets, and the table of commands and the groups each takes.
#include "option_table.h"

#include <algorithm>
#include <iostream>

#include "formats/registry.h"
#include "output/registry.h"

namespace vmerge {
namespace {

// --backend: which reader; its values, help and check come from the backend registry.
void add_backend_option(po::options_description& group, Options& o) {
    static const std::string help = backend_help();
    group.add_options()("backend", po::value(&o.backend)->default_value(kAutoBackend), help.c_str());
}

// --format: what merge writes (its names are checked with the command line's other output choices).
void add_format_option(po::options_description& group, Options& o) {
    static const std::string help = output_format_help();
    group.add_options()("format", po::value(&o.format)->default_value(output_formats().front().name), help.c_str());
}

// The layouts' own flags, from the registry (a new layout's flag appears here by itself).
void add_layout_flag_options(po::options_description& group, RawFlags& raw) {
    for (const BackendFlag* flag : backend_flags()) {
        const std::string spelled = flag->name + (flag->short_name.empty() ? "" : "," + flag->short_name);
        switch (flag->kind) {
            case BackendFlag::Kind::Switch:
                group.add_options()(spelled.c_str(), po::bool_switch(&raw.layout_switches[flag->name]), flag->help.c_str());
                break;
            case BackendFlag::Kind::Count:
                group.add_options()(spelled.c_str(), po::value(&raw.layout_counts[flag->name]), flag->help.c_str());
                break;
            case BackendFlag::Kind::Text:
            case BackendFlag::Kind::Folder:
                group.add_options()(spelled.c_str(), po::value(&raw.layout_texts[flag->name]), flag->help.c_str());
                break;
        }
    }
}

void add_input_options(OptionTable& t, Options& o, RawFlags& raw) {
    add_backend_option(t.input, o);
    add_layout_flag_options(t.input, raw);
    t.input.add_options()
        ("local_dir", po::value(&o.local_dir), "checkpoint folder (e.g. .../global_step_100/actor)")
        ("hf_config", po::value(&o.hf_config),
         "folder with config.json and tokenizer (default <local_dir>/huggingface or hf_config_and_tokenizer)")
        ("role", po::value(&o.watch.rules.role)->default_value("actor"),
         "verl: the role a step folder holding actor/ and critic/ is merged from (merge, test, inspect: default its "
         "only role; watch: default actor)")
        ("step", po::value(&raw.step),
         "verl run folder (--local_dir with global_step_N/): merge step N instead of the one "
         "latest_checkpointed_iteration.txt names")
        ("hf_model_path", po::value(&raw.hf_model_path),
         "verl's legacy merger spelling of --hf_config")
        ("trust_remote_code", po::bool_switch(&raw.trust_remote_code),
         "accepted for verl compatibility; changes nothing (vmerge runs no model code)")
        ("use_cpu_initialization", po::bool_switch(&raw.use_cpu_initialization),
         "accepted for verl compatibility; changes nothing (vmerge builds no model)")
        ("safe_serialization", po::bool_switch(&raw.safe_serialization),
         "accepted for zero_to_fp32.py compatibility; changes nothing (vmerge always writes safetensors)")
        ("tie_word_embedding", po::bool_switch(&o.tie_word_embedding), "treat embeddings as tied (no lm_head.weight)")
        ("is_value_model", po::bool_switch(&o.map.is_value_model), "value/reward model: output_layer -> score.*")
        ("allow_unmapped", po::bool_switch(&o.map.allow_unmapped), "drop checkpoint tensors with no HF name instead of failing")
        ("pad_vocab", po::bool_switch(&o.map.pad_vocab),
         "Megatron: write config.json's vocab_size rows where the checkpoint's embedding or head has fewer "
         "(the missing rows as zeros; refused by default)")
        ("drop_mtp", po::bool_switch(&o.map.drop_mtp),
         "Megatron: leave the multi-token prediction layers (mtp.*) out of the output (recorded in the summary)")
        ("no_mtp_shared_copies", po::bool_switch(&o.map.no_mtp_shared_copies),
         "write no embed_tokens / shared_head.head copies in the multi-token prediction layers (written by default "
         "for DeepSeek-V3, whose release holds them)")
        ("architecture_table", po::value(&o.map.architecture_tables)->composing(),
         "JSON name table to add or override (repeatable; docs/architecture-tables.md)")
        ("tp_size", po::value(&raw.tp), "expected tensor-parallel size (checked against the checkpoint)")
        ("pp_size", po::value(&raw.pp), "expected pipeline-parallel size (checked against the checkpoint)");
}

void add_output_options(OptionTable& t, Options& o, RawFlags& raw) {
    t.conversion.add_options()
        ("dtype", po::value(&o.dtype)->default_value("auto"), "auto (config.json) | keep | bf16 | fp16 | fp32")
        ("max_shard_size", po::value(&raw.max_shard)->default_value("5GB"), "largest output file (5GB = 5*10^9 bytes)");
    t.output.add_options()
        ("target_dir", po::value(&o.output.target), "output folder (merge) or folder to check (verify)")
        ("force", po::bool_switch(&o.output.force), "replace an existing target folder")
        ("resume", po::bool_switch(&o.output.resume), "continue an interrupted merge from its staging folder")
        ("restart", po::bool_switch(&o.output.restart),
         "discard an interrupted merge's staging folder and merge from the start (a plain rerun refuses to)")
        ("skip_free_space_check", po::bool_switch(&raw.skip_free_space_check),
         "write even when the target's file system reports less free space than the merge writes")
        ("reuse", po::value(&o.output.reuse),
         "an earlier merge's output folder (the previous step's): files whose bytes come out the same are "
         "hard-linked from it, unchanged blocks of the others copied from it, not cast and written again")
        ("hf_upload_path", po::value(&o.hf_upload_path),
         "after the merge is committed and verified, upload the target to this Hugging Face repo with `hf upload` "
         "(or `huggingface-cli upload`) found on PATH; refused before merging when neither is there")
        ("private", po::bool_switch(&o.hf_upload_private), "--hf_upload_path: create the repo as private");
    add_format_option(t.output, o);
    t.output.add_options()
        ("compress", po::value(&raw.compress)->default_value("none"),
         "--format hdf5: none | zstd[:LEVEL] (HDF5 filter 32015, LEVEL 1..22, default 3)")
        ("hdf5_chunk_size", po::value(&raw.hdf5_chunk)->default_value("4MiB"),
         "--compress: bytes per compressed chunk (whole rows; a rank's share starts on a chunk boundary)");
}

void add_quantize_and_lora_options(OptionTable& t, Options& o, RawFlags& raw) {
    t.quantizing.add_options()
        ("quantize", po::value(&raw.quantize)->implicit_value("int"),
         "write Linear weights quantized, weights only: int (alone: compressed-tensors pack-quantized, --bits), "
         "fp8 (block FP8, DeepSeek/Qwen layout), fp8-block (compressed-tensors FP8_BLOCK), fp8-dynamic "
         "(compressed-tensors FP8_DYNAMIC), nvfp4 or mxfp4 (compressed-tensors NVFP4A16 / MXFP4A16); "
         "docs/quantization.md")
        ("bits", po::value(&o.quantize_spec.bits)->default_value(4), "4 or 8")
        ("group_size", po::value(&o.quantize_spec.group_size)->default_value(128), "group along the input dimension; 0 = per channel")
        ("symmetric", po::bool_switch(&raw.symmetric), "symmetric quantization, no zero point (the default)")
        ("asymmetric", po::bool_switch(&raw.asymmetric), "asymmetric quantization with zero points")
        ("allow_unsupported_quantization", po::bool_switch(&o.quantize_spec.allow_unsupported),
         "write a --bits/--group_size combination no vLLM kernel runs (refused by default)")
        ("quantize_ignore", po::value(&raw.quantize_ignore),
         "comma-separated modules to leave unquantized (exact names or re:REGEX); lm_head, embeddings, norms and "
         "router gates always are")
        ("fp8_full_blocks_only", po::bool_switch(&o.quantize_spec.fp8_full_blocks_only),
         "--quantize=fp8: leave Linears with a partial 128x128 block unquantized (listed in the config), so "
         "transformers loads the folder without an FP8 GPU")
        ("scale_format", po::value(&raw.scale_format),
         "--quantize=fp8: float (the default: float32 amax/448) or ue8m0 (each block scale rounded up to a power of "
         "two, DeepGEMM / DeepSeek-V3.1; config scale_fmt \"ue8m0\")");
    t.lora.add_options()
        ("extract_lora", po::bool_switch(&raw.extract_lora),
         "write the base model plus the adapter in PEFT format to <target_dir>/lora_adapter/ (the default)")
        ("merge_lora", po::bool_switch(&raw.merge_lora), "fold the adapter into the weights: W + alpha/r * B@A in fp32")
        ("lora_alpha", po::value(&raw.lora_alpha),
         "the adapter's alpha (default: from lora_adapter/adapter_config.json or lora_train_meta.json beside the "
         "checkpoint; never guessed)")
        ("use_rslora", po::bool_switch(&raw.use_rslora), "rank-stabilised LoRA: scale alpha/sqrt(r)");
}

void add_run_options(OptionTable& t, Options& o, RawFlags& raw) {
    t.run.add_options()
        ("max_memory", po::value(&raw.max_memory)->default_value("auto"),
         "tensor buffer memory per rank (auto: a quarter of the node's RAM shared by the node's ranks, "
         "64 MiB to 4 GiB; inspect prints it)")
        ("progress", po::value(&o.progress)->default_value(-1),
         "progress line every N seconds (0: off; default: a live line on a terminal, else every 30 s)")
        ("page_cache", po::value(&o.page_cache)->default_value("auto"),
         "auto | keep | evict: keep what the merge reads and writes in the page cache (auto: when this node's "
         "share fits in its available memory; inspect says which)")
        ("log_json", po::value(&o.log_json), "write per-rank timings, bytes and peak memory to this JSON file")
        ("quiet,q", po::bool_switch(&o.quiet), "print errors only")
        ("low_cpu_mem_usage", po::bool_switch(&raw.low_cpu_mem_usage),
         "verl's flag: caps the automatic --max_memory at 256MiB (memory is always bounded)")
        ("batch_size", po::value(&raw.batch_size), "accepted for verl compatibility (see --max_memory)")
        ("help,h", "print help (vmerge-mpi COMMAND --help for one command)")
        ("version", "print the version");
    t.testing.add_options()
        ("test_hf_dir", po::value(&o.test_hf_dir), "reference Hugging Face folder")
        ("atol", po::value(&o.atol)->default_value(0.0), "absolute tolerance (default: bit for bit)")
        ("rtol", po::value(&o.rtol)->default_value(0.0), "relative tolerance");
    t.inspecting.add_options()
        ("np", po::value(&o.np)->default_value(0), "plan for this many ranks (default: the ranks running)")
        ("json", po::bool_switch(&o.json), "print JSON")
        ("suggest_table", po::bool_switch(&o.suggest_table),
         "propose the architecture table learned from --base, with its evidence (map's path)")
        ("simulate", po::value(&o.simulate),
         "plan without checkpoint files, from --hf_config and a layout: fsdp:W or megatron:tpT,ppP[,epE][,vppV]");
}

void add_watch_options(OptionTable& t, Options& o) {
    t.watching.add_options()
        ("root", po::value(&o.watch.root), "the training run's checkpoint folder (verl default_local_dir, Megatron-LM --save, DCP steps), or s3://BUCKET/PREFIX")
        ("target_root", po::value(&o.watch.target_root), "one merged folder per step below it: TARGET_ROOT/global_step_N/ (a folder or s3://BUCKET/PREFIX)")
        ("every", po::value(&o.watch.every_seconds)->default_value(60), "seconds between looks at the run")
        ("once", po::bool_switch(&o.watch.once), "one pass over the run, then exit")
        ("keep_last", po::value(&o.watch.keep_last)->default_value(0), "keep the newest K merged steps, remove older ones vmerge wrote (0: keep all)")
        ("no_reuse", po::bool_switch(&o.watch.no_reuse),
         "merge every step in full (default: --reuse the newest earlier merged step, so unchanged files are linked)")
        ("settle", po::value(&o.watch.rules.settle_seconds)->default_value(60),
         "FSDP steps without a completion marker: rank files unchanged this many seconds");
}

void add_map_options(OptionTable& t, Options& o) {
    t.mapping.add_options()
        ("base", po::value(&o.map_base), "map: the Hugging Face model folder the checkpoint was trained from")
        ("out", po::value(&o.map_out), "map: write the learned architecture table here (default: print it)");
}

// The commands, in --help order, with the groups each takes.
const std::vector<CommandInfo> kCommands = {
    {"merge",
     {"checkpoint -> Hugging Face folder (--local_dir CKPT --target_dir OUT, or zero_to_fp32.py's merge CKPT OUT)"},
     {&OptionTable::input, &OptionTable::conversion, &OptionTable::output, &OptionTable::lora, &OptionTable::quantizing,
      &OptionTable::run}},
    {"test",
     {"merge without writing and compare with --test_hf_dir"},
     {&OptionTable::input, &OptionTable::conversion, &OptionTable::lora, &OptionTable::testing, &OptionTable::run}},
    {"inspect",
     {"print what was detected and the plan for --np N ranks"},
     {&OptionTable::input, &OptionTable::conversion, &OptionTable::inspecting, &OptionTable::lora,
      &OptionTable::quantizing, &OptionTable::mapping, &OptionTable::run}},
    {"verify",
     {"check an output folder (--target_dir): safetensors rules, index, recorded checksums;",
      "or an HDF5 archive (model.h5): stored as vmerge stores it, every chunk decoded"},
     {&OptionTable::run},
     "--target_dir DIR"},
    {"watch",
     {"merge every finished checkpoint of a training run (--root) into --target_root, as it appears"},
     {&OptionTable::watching, &OptionTable::input, &OptionTable::conversion, &OptionTable::output, &OptionTable::lora,
      &OptionTable::quantizing, &OptionTable::run}},
    {"map",
     {"learn the checkpoint's architecture table from its base model (--local_dir CKPT --base HF_DIR --out FILE)"},
     {&OptionTable::input, &OptionTable::mapping, &OptionTable::run}},
};

// The groups `command` takes; none for an unknown one.
std::vector<const po::options_description*> command_groups(const OptionTable& t, const std::string& command) {
    std::vector<const po::options_description*> groups;
    if (const CommandInfo* c = find_command(command))
        for (const auto group : c->groups) groups.push_back(&(t.*group));
    return groups;
}

// Whether one of the groups `command` takes holds `flag`.
bool in_groups(const OptionTable& t, const CommandInfo& command, const std::string& flag) {
    for (const auto* group : command_groups(t, command.name))
        if (group->find_nothrow(flag, false)) return true;
    return false;
}

}  // namespace

const CommandInfo* find_command(const std::string& name) {
    for (const auto& c : kCommands)
        if (c.name == name) return &c;
    return nullptr;
}

std::string command_names() {
    std::string names;
    for (size_t i = 0; i < kCommands.size(); ++i)
        names += (i == 0 ? "" : i + 1 == kCommands.size() ? " or " : ", ") + kCommands[i].name;
    return names;
}

OptionTable option_table(Options& o, RawFlags& raw) {
    OptionTable t;
    add_input_options(t, o, raw);
    add_output_options(t, o, raw);
    add_quantize_and_lora_options(t, o, raw);
    add_run_options(t, o, raw);
    add_watch_options(t, o);
    add_map_options(t, o);
    return t;
}

po::options_description visible_options(const OptionTable& t) {
    po::options_description visible;
    visible.add(t.input).add(t.conversion).add(t.output).add(t.lora).add(t.quantizing).add(t.run).add(t.testing)
        .add(t.inspecting).add(t.watching).add(t.mapping);
    return visible;
}

void refuse_flags_not_taken(const OptionTable& t, const std::string& command, const po::variables_map& vm) {
    const CommandInfo& c = *find_command(command);
    for (const auto& [flag, value] : vm) {
        if (value.defaulted() || flag == "command" || flag == "folders" || flag == "help" || flag == "version") continue;
        if (in_groups(t, c, flag) || c.usage.starts_with("--" + flag + " ")) continue;
        std::string taking;  // the commands whose groups hold it, for the message
        for (const auto& other : kCommands)
            if (in_groups(t, other, flag)) taking += (taking.empty() ? "" : ", ") + other.name;
        throw UsageError("--" + flag + " applies to " + taking + ", not " + command);
    }
}

void print_help(const OptionTable& t, const std::string& command) {
    std::cout << "vmerge-mpi COMMAND [options]   (every --long-option also works with dashes)\n";
    for (const auto& c : kCommands)
        for (size_t i = 0; i < c.help.size(); ++i) {
            std::string label = i == 0 ? c.name : "";  // the name, then its help in one column
            label.resize(std::max<size_t>(label.size() + 1, 9), ' ');
            std::cout << "  " << label << c.help[i] << "\n";
        }
    std::cout << "\n";
    const auto groups = command_groups(t, command);
    if (const CommandInfo* c = find_command(command); c && !c->usage.empty())
        std::cout << c->name << ": " << c->usage << "\n";
    for (const auto* group : groups) std::cout << *group;
    if (groups.empty()) std::cout << visible_options(t);
    std::cout << "\n";
}

}  // namespace vmerge
