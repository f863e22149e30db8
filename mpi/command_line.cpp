#include "command_line.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <iostream>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>

#include "core/bounded_number.h"
#include "core/error.h"
#include "mapping/output_rules.h"
#include "mapping/quantization.h"
#include "formats/registry.h"
#include "output/hdf5/zstd_codec.h"
#include "output/registry.h"

namespace vmerge {
namespace po = boost::program_options;

uint64_t parse_byte_size(const std::string& text, const std::string& flag, uint64_t max_bytes) {
    const std::string what = flag + " " + text;
    // Digits, an optional fraction and exponent, then the unit: no sign, nan, inf or hex
    // (std::stod takes them all, and "nan" cast to an integer is undefined).
    size_t pos = 0;
    auto digits = [&] {
        const size_t from = pos;
        while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
        return pos > from;
    };
    bool number = digits();
    if (pos < text.size() && text[pos] == '.') {
        ++pos;
        number = digits() || number;
    }
    if (number && pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
        const size_t mark = pos++;
        if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) ++pos;
        if (!digits()) pos = mark;  // "5E" is not an exponent
    }
    if (!number)
        throw UsageError(what + ": expected a positive size: a number and an optional unit (5GB, 512MiB, 128M)");
    std::string unit = text.substr(pos);
    for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    // Decimal units (KB = 10^3), binary ones (KiB = 2^10), and Slurm's --mem letters
    // (K, M, G, T = KiB, MiB, GiB, TiB).
    static const std::map<std::string, long double> scales{
        {"", 1},      {"B", 1},           {"KB", 1e3},        {"MB", 1e6},        {"GB", 1e9},
        {"TB", 1e12}, {"KIB", 1024.0L},   {"MIB", 1048576.0L}, {"GIB", 1073741824.0L},
        {"TIB", 1099511627776.0L},         {"K", 1024.0L},     {"M", 1048576.0L},  {"G", 1073741824.0L},
        {"T", 1099511627776.0L}};
    auto scale = scales.find(unit);
    if (scale == scales.end()) throw UsageError(what + ": unknown unit '" + text.substr(pos) + "' (B, KB, MB, GB, TB, "
                                                "KiB, MiB, GiB, TiB, or Slurm's K, M, G, T)");
    const long double bytes = std::strtold(text.substr(0, pos).c_str(), nullptr) * scale->second;
    if (!std::isfinite(bytes) || bytes > static_cast<long double>(max_bytes))
        throw UsageError(what + ": more than " + std::to_string(max_bytes) + " bytes");
    if (bytes < 1) throw UsageError(what + ": expected a positive size (at least 1 byte)");
    return static_cast<uint64_t>(std::roundl(bytes));  // "1.1GB": 1100000000, not one byte less
}

namespace {

// --format, --compress and the archive backend (docs/hdf5.md).
void check_format(const Options& o);

void parse_archive_options(Options& o, const std::string& compress, bool compress_given) {
    check_format(o);
    if (compress != "none") {
        if (compress != "zstd" && !compress.starts_with("zstd:"))
            throw UsageError("--compress " + compress + ": expected none, zstd or zstd:LEVEL");
        o.output.zstd_level = kZstdDefaultLevel;
        if (compress != "zstd") {
            const auto value = parse_int_within(compress.substr(5), kZstdMinLevel, kZstdMaxLevel);
            if (!value)
                throw UsageError("--compress " + compress + ": the zstd level must be a whole number from " +
                                 std::to_string(kZstdMinLevel) + " to " + std::to_string(kZstdMaxLevel));
            o.output.zstd_level = static_cast<int>(*value);
        }
    }
    const OutputFormatInfo& format = *find_output_format(o.format);
    if (compress_given && !format.compression)
        throw UsageError("--compress applies to --format " + output_formats_with(&OutputFormatInfo::compression));
    if (o.command == "merge" && ((o.quantize && !format.quantized) || (o.output.resume && !format.resumable)))
        throw UsageError("--format " + o.format + " does not combine with " + (o.quantize && !format.quantized ? "--quantize" : "--resume"));
    if (!o.output.reuse.empty()) {
        if (o.command != "merge") throw UsageError("--reuse applies to merge (watch passes each step the previous one)");
        if (!format.reusable) throw UsageError("--format " + o.format + " does not combine with --reuse");
        // A resumed staging folder holds blocks of the earlier run: which of them equal the
        // previous output was never checked, so no file of it may be linked in their place.
        if (o.output.resume) throw UsageError("--reuse and --resume exclude each other");
    }
    if (o.output.resume && o.output.restart) throw UsageError("--resume and --restart exclude each other");
    const bool archive_input = is_archive_backend(o.backend);
    const std::string& folder_format = output_formats().front().name;
    if (archive_input && o.format != folder_format)
        throw UsageError("--backend " + o.backend + " reads an archive; its output is a " + folder_format +
                         " folder (drop --format " + o.format + ")");
    if (archive_input && o.command != "merge" && o.command != "inspect")
        throw UsageError("--backend " + o.backend + " works with merge (archive -> Hugging Face folder) and inspect");
    // An archive converts back as stored: bit for bit what was merged into it.
    if (archive_input && ((o.dtype != "auto" && o.dtype != "keep") || o.quantize))
        throw UsageError("--backend " + o.backend + " writes the archive's tensors as stored; " +
                         (o.quantize ? "--quantize" : "--dtype " + o.dtype) + " applies to checkpoints");
}

// A whole-number flag within [lo, hi], or a usage error naming it.
int bounded_flag(const char* flag, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
        throw UsageError(std::string(flag) + " " + std::to_string(value) + ": expected " + range_text(lo, hi));
    return static_cast<int>(value);
}

double tolerance_flag(const char* flag, double value) {
    if (!std::isfinite(value) || value < 0) {
        std::ostringstream text;  // "nan", "inf", "-1" as typed (std::to_string: "-1.000000")
        text << value;
        throw UsageError(std::string(flag) + " " + text.str() + ": expected a finite number >= 0");
    }
    return value;
}

// Every numeric flag bounded: each drives a loop, an allocation or a comparison.
void check_number_flags(const Options& o) {
    bounded_flag("--np", o.np, 0, kMaxWorldSize);
    bounded_flag("--progress", o.progress, -1, 86400);
    bounded_flag("--group_size", o.quantize_spec.group_size, 0, int64_t{1} << 24);
    tolerance_flag("--atol", o.atol);
    tolerance_flag("--rtol", o.rtol);
}

}  // namespace

namespace {

// Flags whose text becomes a typed Options field once every flag is parsed.
struct RawFlags {
    std::string max_shard = "5GB", max_memory = "auto", compress = "none", hdf5_chunk = "4MiB";
    std::string quantize_ignore;
    std::string quantize;  // the --quantize scheme ("int" when given alone)
    int tp = 0, pp = 0, batch_size = 0, step = 0;
    bool low_cpu_mem_usage = false, symmetric = false, asymmetric = false, extract_lora = false, merge_lora = false,
         use_rslora = false;
    bool trust_remote_code = false, use_cpu_initialization = false;
    bool skip_free_space_check = false, safe_serialization = false;
    std::vector<std::string> folders;  // zero_to_fp32.py's form: merge CHECKPOINT_DIR OUTPUT_DIR
    std::string hf_model_path;
    double lora_alpha = 0;
    // The layouts' own flags (formats/backend_flags.h) by name, each in the map of its kind.
    std::map<std::string, bool> layout_switches;
    std::map<std::string, int> layout_counts;
    std::map<std::string, std::string> layout_texts;
};

// The option table: every flag once, in groups, so `vmerge-mpi COMMAND --help` shows what
// that command uses.
struct OptionTable {
    po::options_description input{"Checkpoint and model"};
    po::options_description output{"Output"};
    po::options_description conversion{"Output tensors"};
    po::options_description quantizing{"Quantized output (int pack-quantized, block FP8, FP8_DYNAMIC; for vLLM)"};
    po::options_description lora{"LoRA adapters (PEFT-wrapped FSDP/DCP state dicts, Megatron adapter checkpoints)"};
    po::options_description run{"Running"};
    po::options_description testing{"test"};
    po::options_description inspecting{"inspect"};
    po::options_description watching{"watch (every merge option applies to each step)"};
};

// --backend: which reader; its values, help and check come from the backend registry.
void add_backend_option(po::options_description& group, Options& o) {
    static const std::string help = backend_help();
    group.add_options()("backend", po::value(&o.backend)->default_value(kAutoBackend), help.c_str());
}

void check_backend(const Options& o) {
    if (!is_backend_value(o.backend)) throw UsageError("--backend " + o.backend + ": expected " + backend_values_text());
}

// --format: what merge writes (its names are checked in check_format).
void add_format_option(po::options_description& group, Options& o) {
    static const std::string help = output_format_help();
    group.add_options()("format", po::value(&o.format)->default_value(output_formats().front().name), help.c_str());
}

// --format: its values come from the output format registry.
void check_format(const Options& o) {
    if (!find_output_format(o.format)) throw UsageError("--format " + o.format + ": expected " + output_format_choices());
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

// The layout flags given, checked by kind, into o.backend_flags.
void take_layout_flags(Options& o, const RawFlags& raw, const po::variables_map& vm) {
    for (const BackendFlag* flag : backend_flags()) {
        const std::string& name = flag->name;
        if (!vm.count(name) || vm[name].defaulted()) continue;
        switch (flag->kind) {
            case BackendFlag::Kind::Switch:
                if (raw.layout_switches.at(name)) o.backend_flags.set(name, "");
                break;
            case BackendFlag::Kind::Count:
                o.backend_flags.set(name, std::to_string(bounded_flag(("--" + name).c_str(), raw.layout_counts.at(name), 0,
                                                                      kMaxIteration)));
                break;
            case BackendFlag::Kind::Text:
            case BackendFlag::Kind::Folder:
                if (raw.layout_texts.at(name).empty())
                    throw UsageError("--" + name + " \"\": expected " + flag->expected);
                o.backend_flags.set(name, raw.layout_texts.at(name));
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
         "fp8 (block FP8, DeepSeek/Qwen layout) or fp8-dynamic (compressed-tensors FP8_DYNAMIC); docs/quantization.md")
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
         "transformers loads the folder without an FP8 GPU");
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
        ("simulate", po::value(&o.simulate),
         "plan without checkpoint files, from --hf_config and a layout: fsdp:W or megatron:tpT,ppP[,epE][,vppV]");
}

void add_watch_options(OptionTable& t, Options& o) {
    t.watching.add_options()
        ("root", po::value(&o.watch.root), "the training run's checkpoint folder (verl default_local_dir, Megatron-LM --save, DCP steps)")
        ("target_root", po::value(&o.watch.target_root), "one merged folder per step below it: TARGET_ROOT/global_step_N/")
        ("every", po::value(&o.watch.every_seconds)->default_value(60), "seconds between looks at the run")
        ("once", po::bool_switch(&o.watch.once), "one pass over the run, then exit")
        ("keep_last", po::value(&o.watch.keep_last)->default_value(0), "keep the newest K merged steps, remove older ones vmerge wrote (0: keep all)")
        ("no_reuse", po::bool_switch(&o.watch.no_reuse),
         "merge every step in full (default: --reuse the newest earlier merged step, so unchanged files are linked)")
        ("settle", po::value(&o.watch.rules.settle_seconds)->default_value(60),
         "FSDP steps without a completion marker: rank files unchanged this many seconds");
}

OptionTable option_table(Options& o, RawFlags& raw) {
    OptionTable t;
    add_input_options(t, o, raw);
    add_output_options(t, o, raw);
    add_quantize_and_lora_options(t, o, raw);
    add_run_options(t, o, raw);
    add_watch_options(t, o);
    return t;
}

po::options_description visible_options(const OptionTable& t) {
    po::options_description visible;
    visible.add(t.input).add(t.conversion).add(t.output).add(t.lora).add(t.quantizing).add(t.run).add(t.testing)
        .add(t.inspecting).add(t.watching);
    return visible;
}

// The option groups each command takes, in the order its --help shows them: the one list that
// both the help text and the check that refuses a flag the command would ignore read.
std::vector<const po::options_description*> command_groups(const OptionTable& t, const std::string& command) {
    if (command == "merge") return {&t.input, &t.conversion, &t.output, &t.lora, &t.quantizing, &t.run};
    if (command == "test") return {&t.input, &t.conversion, &t.lora, &t.testing, &t.run};
    if (command == "inspect") return {&t.input, &t.conversion, &t.inspecting, &t.lora, &t.quantizing, &t.run};
    if (command == "verify") return {&t.run};
    if (command == "watch") return {&t.watching, &t.input, &t.conversion, &t.output, &t.lora, &t.quantizing, &t.run};
    return {};
}

// The commands whose groups hold a flag, for "applies to" messages.
std::string commands_taking(const OptionTable& t, const std::string& flag) {
    std::string names;
    for (const char* command : {"merge", "test", "inspect", "verify", "watch"})
        for (const auto* group : command_groups(t, command))
            if (group->find_nothrow(flag, false)) {
                names += (names.empty() ? "" : ", ") + std::string(command);
                break;
            }
    return names;
}

// A flag that the command does not use is refused, never ignored (`merge --np 4`).
void refuse_flags_not_taken(const OptionTable& t, const std::string& command, const po::variables_map& vm) {
    const auto groups = command_groups(t, command);
    for (const auto& [flag, value] : vm) {
        if (value.defaulted() || flag == "command" || flag == "folders" || flag == "help" || flag == "version") continue;
        if (command == "verify" && flag == "target_dir") continue;
        bool taken = false;
        for (const auto* group : groups) taken = taken || group->find_nothrow(flag, false) != nullptr;
        if (!taken) throw UsageError("--" + flag + " applies to " + commands_taking(t, flag) + ", not " + command);
    }
}

void print_help(const OptionTable& t, const std::string& command) {
    std::cout << "vmerge-mpi COMMAND [options]   (every --long-option also works with dashes)\n"
                 "  merge    checkpoint -> Hugging Face folder (--local_dir CKPT --target_dir OUT, or zero_to_fp32.py's merge CKPT OUT)\n"
                 "  test     merge without writing and compare with --test_hf_dir\n"
                 "  inspect  print what was detected and the plan for --np N ranks\n"
                 "  verify   check an output folder (--target_dir): safetensors rules, index, recorded checksums;\n"
                 "           or an HDF5 archive (model.h5): stored as vmerge stores it, every chunk decoded\n"
                 "  watch    merge every finished checkpoint of a training run (--root) into --target_root, as it appears\n"
              << "\n";
    const auto groups = command_groups(t, command);
    if (command == "verify") std::cout << "verify: --target_dir DIR\n";
    for (const auto* group : groups) std::cout << *group;
    if (groups.empty()) std::cout << visible_options(t);
    std::cout << "\n";
}

// One spelling internally: --foo-bar and --foo_bar both become --foo_bar.
std::vector<std::string> normalized_args(int argc, const char* const* argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a.rfind("--", 0) == 0) {
            const size_t end = std::min(a.find('='), a.size());
            for (size_t k = 2; k < end; ++k)
                if (a[k] == '-') a[k] = '_';
        }
        // `--quantize fp8`: the scheme may follow as its own word (`--quantize` alone is the
        // int scheme, so only a scheme name is taken as its value).
        if (a == "--quantize" && i + 1 < argc && parse_quant_scheme(argv[i + 1])) a += std::string("=") + argv[++i];
        args.push_back(a);
    }
    return args;
}

po::variables_map parse_args(const std::vector<std::string>& args, const OptionTable& t, Options& o, RawFlags& raw) {
    po::options_description all;
    all.add(visible_options(t));
    po::options_description hidden;
    hidden.add_options()("command", po::value(&o.command))("folders", po::value(&raw.folders));
    all.add(hidden);
    po::positional_options_description positional;
    positional.add("command", 1).add("folders", -1);
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(e.what());
    }
    return vm;
}

// --quantize[=SCHEME]; the int scheme's flags are refused with an FP8 one (they would be ignored).
void check_quantize_scheme(Options& o, const RawFlags& raw, const po::variables_map& vm) {
    o.quantize = vm.count("quantize") > 0;
    if (!o.quantize && o.quantize_spec.fp8_full_blocks_only)
        throw UsageError("--fp8_full_blocks_only applies to --quantize=fp8 (block FP8)");
    if (!o.quantize) return;
    const auto scheme = parse_quant_scheme(raw.quantize);
    if (!scheme) throw UsageError("--quantize " + raw.quantize + ": expected int, fp8 or fp8-dynamic");
    o.quantize_spec.scheme = *scheme;
    if (o.quantize_spec.fp8_full_blocks_only && *scheme != QuantScheme::Fp8Block)
        throw UsageError("--fp8_full_blocks_only applies to --quantize=fp8 (block FP8); --quantize=" +
                         quant_scheme_name(*scheme) + " has no blocks");
    if (*scheme == QuantScheme::Int) return;
    for (const char* flag : {"bits", "group_size", "symmetric", "asymmetric", "allow_unsupported_quantization"})
        if (vm.count(flag) && !vm[flag].defaulted())
            throw UsageError("--" + std::string(flag) + " applies to --quantize=int; --quantize=" + quant_scheme_name(*scheme) +
                             " writes 8-bit floats with its own scales (docs/quantization.md)");
}

// The dtype, quantization and LoRA flags, in the order their errors are reported.
void check_value_flags(Options& o, const RawFlags& raw, const po::variables_map& vm) {
    try {
        parse_dtype_choice(o.dtype);  // the one list of --dtype names
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    check_quantize_scheme(o, raw, vm);
    if (raw.symmetric && raw.asymmetric) throw UsageError("--symmetric and --asymmetric exclude each other");
    if (o.quantize_spec.bits != 4 && o.quantize_spec.bits != 8) throw UsageError("--bits " + std::to_string(o.quantize_spec.bits) + ": expected 4 or 8");
    check_number_flags(o);
    for (size_t start = 0; start < raw.quantize_ignore.size();) {
        const size_t comma = std::min(raw.quantize_ignore.find(',', start), raw.quantize_ignore.size());
        if (comma > start) o.quantize_spec.ignore.push_back(raw.quantize_ignore.substr(start, comma - start));
        start = comma + 1;
    }
    if (o.quantize && o.command == "test")
        throw UsageError("--quantize applies to merge and inspect; test compares unquantized tensors");
    if (raw.extract_lora && raw.merge_lora) throw UsageError("--extract_lora and --merge_lora exclude each other");
    if (vm.count("lora_alpha")) {
        if (!(raw.lora_alpha > 0) || !std::isfinite(raw.lora_alpha))
            throw UsageError("--lora_alpha must be positive and finite (0 would make the adapter do nothing)");
        o.lora.alpha = raw.lora_alpha;
    }
    o.quantize_spec.symmetric = !raw.asymmetric;
    o.lora.mode = raw.merge_lora ? LoraMode::Merge : LoraMode::Extract;
    if (raw.use_rslora) o.lora.use_rslora = true;
}

// zero_to_fp32.py's form, `merge CHECKPOINT_DIR OUTPUT_DIR`: the two folders by position.
void take_positional_folders(Options& o, const std::vector<std::string>& folders) {
    if (folders.empty()) return;
    if (o.command != "merge")
        throw UsageError("unexpected argument '" + folders[0] + "': only merge takes its folders by position "
                         "(merge CHECKPOINT_DIR OUTPUT_DIR, as zero_to_fp32.py)");
    if (folders.size() != 2)
        throw UsageError("merge CHECKPOINT_DIR OUTPUT_DIR: expected two folders by position, got " +
                         std::to_string(folders.size()) + " ('" + folders.back() + "')");
    if (!o.local_dir.empty() || !o.output.target.empty())
        throw UsageError("merge " + folders[0] + " " + folders[1] + ": the folders are given by position and as "
                         "--local_dir/--target_dir; give them once");
    o.local_dir = folders[0];
    o.output.target = folders[1];
}

// Sizes and counts, then what each command needs.
void check_sizes_and_needs(Options& o, const RawFlags& raw, const po::variables_map& vm) {
    o.output.check_free_space = !raw.skip_free_space_check;
    take_positional_folders(o, raw.folders);
    o.output.max_shard_size = parse_byte_size(raw.max_shard, "--max_shard_size");
    o.max_memory = raw.max_memory == "auto" ? 0 : parse_byte_size(raw.max_memory, "--max_memory");
    o.low_cpu_mem_usage = raw.low_cpu_mem_usage;
    if (vm.count("tp_size")) o.map.tp_size = bounded_flag("--tp_size", raw.tp, 1, kMaxWorldSize);
    if (vm.count("pp_size")) o.map.pp_size = bounded_flag("--pp_size", raw.pp, 1, kMaxWorldSize);
    take_layout_flags(o, raw, vm);
    // One --role: watch's (default actor) and, given explicitly, the one a step folder is read from.
    if (vm.count("role") && !vm["role"].defaulted()) o.level.role = o.watch.rules.role;
    if (vm.count("step")) o.level.step = bounded_flag("--step", raw.step, 0, kMaxIteration);
    if (!raw.hf_model_path.empty()) {
        if (!o.hf_config.empty() && o.hf_config != raw.hf_model_path)
            throw UsageError("--hf_model_path and --hf_config name two folders (" + raw.hf_model_path + ", " +
                             o.hf_config + "): --hf_model_path is verl's older spelling of --hf_config, give one");
        o.hf_config = raw.hf_model_path;
    }
    // --hf_config .../config.json names the file: the folder that holds it is meant.
    std::error_code ec;
    if (std::filesystem::path(o.hf_config).filename() == "config.json" && std::filesystem::is_regular_file(o.hf_config, ec))
        o.hf_config = std::filesystem::path(o.hf_config).parent_path().empty()
                          ? "."
                          : std::filesystem::path(o.hf_config).parent_path().string();
    if (o.hf_upload_private && o.hf_upload_path.empty()) throw UsageError("--private applies to --hf_upload_path");
    if (!o.hf_upload_path.empty() && o.command != "merge")
        throw UsageError("--hf_upload_path applies to merge (" + o.command + " writes no folder)");
    if (vm.count("hf_upload_path") && (o.hf_upload_path.empty() || o.hf_upload_path.starts_with("-")))
        throw UsageError("--hf_upload_path '" + o.hf_upload_path + "': expected a Hugging Face repo id (user/model)");
    if (o.command == "watch") {
        if (o.watch.root.empty() || o.watch.target_root.empty()) throw UsageError("watch needs --root and --target_root");
        bounded_flag("--every", o.watch.every_seconds, 1, 7 * 86400);
        bounded_flag("--keep_last", o.watch.keep_last, 0, 1 << 20);
        bounded_flag("--settle", o.watch.rules.settle_seconds, 0, 7 * 86400);
        if (o.backend_flags.given("allow_incomplete"))
            throw UsageError("--allow_incomplete applies to merge, test and inspect: watch merges only the steps "
                             "whose save completed");
        if (!o.local_dir.empty() || !o.output.target.empty())
            throw UsageError("watch takes --root and --target_root (each step's --local_dir and --target_dir come from them)");
        return;
    }
    if (o.command != "verify" && o.local_dir.empty() && o.simulate.empty())
        throw UsageError(o.command + " needs --local_dir");
    if (!o.simulate.empty() && (o.command != "inspect" || o.hf_config.empty()))
        throw UsageError("--simulate works with inspect and needs --hf_config (the model's config.json folder)");
    if ((o.command == "merge" || o.command == "verify") && o.output.target.empty())
        throw UsageError(o.command + " needs --target_dir");
    if (o.command == "test" && o.test_hf_dir.empty()) throw UsageError("test needs --test_hf_dir");
}

}  // namespace

std::optional<Options> parse_command_line(int argc, const char* const* argv, bool print_help_text) {
    Options o;
    RawFlags raw;
    const OptionTable table = option_table(o, raw);
    const po::variables_map vm = parse_args(normalized_args(argc, argv), table, o, raw);
    if (vm.count("version")) {
        if (print_help_text) std::cout << "vmerge-mpi " << VMERGE_VERSION << "\n";
        return std::nullopt;
    }
    if (vm.count("help") || o.command.empty()) {
        if (print_help_text) print_help(table, o.command);
        if (vm.count("help")) return std::nullopt;
        throw UsageError("no command given (merge, test, inspect, verify or watch)");
    }
    if (o.command != "merge" && o.command != "test" && o.command != "inspect" && o.command != "verify" &&
        o.command != "watch")
        throw UsageError("unknown command '" + o.command + "' (merge, test, inspect, verify or watch)");
    refuse_flags_not_taken(table, o.command, vm);
    check_value_flags(o, raw, vm);
    check_sizes_and_needs(o, raw, vm);
    check_backend(o);
    if (o.page_cache != "auto" && o.page_cache != "keep" && o.page_cache != "evict")
        throw UsageError("--page_cache " + o.page_cache + ": expected auto, keep or evict");
    parse_archive_options(o, raw.compress, !vm["compress"].defaulted());
    if (!o.hf_upload_path.empty() && o.format != "safetensors")
        throw UsageError("--hf_upload_path uploads a Hugging Face folder: it combines with --format safetensors only");
    // HDF5's chunk limit is 4 GiB.
    o.output.chunk_bytes = parse_byte_size(raw.hdf5_chunk, "--hdf5_chunk_size", (4ull << 30) - 1);
    return o;
}

}  // namespace vmerge
