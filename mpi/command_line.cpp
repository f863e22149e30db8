#include "command_line.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "core/bounded_number.h"
#include "core/error.h"
#include "formats/registry.h"
#include "hdf5/zstd_codec.h"
#include "io/object_url.h"
#include "mapping/output_rules.h"
#include "mapping/quantization.h"
#include "option_table.h"
#include "output/registry.h"

namespace vmerge {

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

// The archive's name, refused with its reason by a build without it (its choice is not registered there).
constexpr const char* kArchiveName = "hdf5";

void check_backend(const Options& o) {
    if (o.backend == kArchiveName)
        if (const std::string why = hdf5_archive_unavailable("--backend " + o.backend); !why.empty()) throw UsageError(why);
    if (!is_backend_value(o.backend)) throw UsageError("--backend " + o.backend + ": expected " + backend_values_text());
}

// --format (its values come from the output format registry), --compress, and what the chosen
// backend refuses (docs/hdf5.md).
void check_output_choices(Options& o, const std::string& compress, bool compress_given,
                          const po::variables_map& vm) {
    if (!find_output_format(o.format)) throw UsageError("--format " + o.format + ": expected " + output_format_choices());
    if (o.format == kArchiveName)
        if (const std::string why = hdf5_archive_unavailable("--format " + o.format); !why.empty()) throw UsageError(why);
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
    const bool float4 = o.quantize_spec.scheme == QuantScheme::Nvfp4 || o.quantize_spec.scheme == QuantScheme::Mxfp4;
    if (o.quantize && float4 && o.format != output_formats().front().name)  // merge and watch
        throw UsageError("--quantize=" + quant_scheme_name(o.quantize_spec.scheme) + " writes a safetensors folder; --format " +
                         o.format + " does not take the 4-bit float schemes");
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
    // What the chosen layouts refuse (an archive converts back as stored, into a folder).
    CheckpointRequest request{o.backend, o.command, o.format, output_formats().front().name, o.dtype, o.quantize, {}};
    for (const auto& [flag, value] : vm)
        if (!value.defaulted() && flag != "command" && flag != "folders") request.given.push_back(flag);
    const std::string refused = refuse_request(request);
    if (!refused.empty()) throw UsageError(refused);
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
    if (!o.quantize && vm.count("scale_format"))
        throw UsageError("--scale_format applies to --quantize=fp8 (block FP8)");
    if (!o.quantize) return;
    const auto scheme = parse_quant_scheme(raw.quantize);
    if (!scheme)
        throw UsageError("--quantize " + raw.quantize + ": expected int, fp8, fp8-block, fp8-dynamic, nvfp4 or mxfp4");
    o.quantize_spec.scheme = *scheme;
    if (vm.count("scale_format")) {
        if (*scheme != QuantScheme::Fp8Block)
            throw UsageError("--scale_format applies to --quantize=fp8 (block FP8); --quantize=" + quant_scheme_name(*scheme) +
                             " stores its scales in its own format");
        if (raw.scale_format != "float" && raw.scale_format != "ue8m0")
            throw UsageError("--scale_format " + raw.scale_format + ": expected float or ue8m0");
        o.quantize_spec.scale_format = raw.scale_format == "ue8m0" ? Fp8ScaleFormat::Ue8m0 : Fp8ScaleFormat::Float;
    }
    if (o.quantize_spec.fp8_full_blocks_only && *scheme != QuantScheme::Fp8Block)
        throw UsageError("--fp8_full_blocks_only applies to --quantize=fp8 (block FP8); --quantize=" +
                         quant_scheme_name(*scheme) +
                         (*scheme == QuantScheme::Fp8CtBlock
                              ? " leaves inputs not a multiple of 128 unquantized, and compressed-tensors loads partial "
                                "row blocks"
                              : " has no blocks"));
    if (*scheme == QuantScheme::Int) return;
    for (const char* flag : {"bits", "group_size", "symmetric", "asymmetric", "allow_unsupported_quantization"})
        if (vm.count(flag) && !vm[flag].defaulted())
            throw UsageError("--" + std::string(flag) + " applies to --quantize=int; --quantize=" + quant_scheme_name(*scheme) +
                             " writes " + (*scheme == QuantScheme::Nvfp4 || *scheme == QuantScheme::Mxfp4 ? "4" : "8") +
                             "-bit floats with its own scales (docs/quantization.md)");
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
    // Inputs may be s3:// URLs (io/input_tree.h); merge writes into a bucket
    // (output/s3/bucket_output.h) and watch into a bucket prefix, one step each. A URL taken as a
    // local path would create a folder named "s3:".
    if (is_object_url(o.output.target) && o.command != "merge")
        throw UsageError("--target_dir " + o.output.target + ": " + o.command + " takes a local folder; only merge writes to s3://");
    if (is_object_url(o.output.target) && !o.hf_upload_path.empty())
        throw UsageError("--hf_upload_path uploads a local folder; --target_dir " + o.output.target + " is a bucket");
    // --reuse links or copies the previous output's unchanged files into the new one: a bucket
    // has no links, and finding the unchanged blocks would download the previous output, as many
    // bytes as the merge uploads (docs/cluster.md).
    if (is_object_url(o.output.target) && !o.output.reuse.empty())
        throw UsageError("--reuse takes over a local output's files; --target_dir " + o.output.target + " is a bucket");
    if (is_object_url(o.output.reuse))
        throw UsageError("--reuse " + o.output.reuse + ": links a local earlier output's files; an output in a bucket "
                         "cannot lend its files to a folder");
    if (is_object_url(o.watch.target_root) && o.format != output_formats().front().name)
        throw UsageError("--target_root " + o.watch.target_root + ": a bucket takes safetensors only; --format " + o.format +
                         " writes to a folder");
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
    if (o.command == "map" && o.map_base.empty()) throw UsageError("map needs --base (the model the checkpoint was trained from)");
    if (o.command == "inspect" && o.suggest_table && (o.map_base.empty() || !o.simulate.empty()))
        throw UsageError("inspect --suggest_table needs --base (the model the checkpoint was trained from) and checkpoint files "
                         "(no --simulate)");
    if (o.command == "inspect" && !o.suggest_table && (!o.map_base.empty() || !o.map_out.empty()))
        throw UsageError("--base and --out apply to inspect only with --suggest_table");
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
        throw UsageError("no command given (" + command_names() + ")");
    }
    if (!find_command(o.command)) throw UsageError("unknown command '" + o.command + "' (" + command_names() + ")");
    refuse_flags_not_taken(table, o.command, vm);
    check_value_flags(o, raw, vm);
    check_sizes_and_needs(o, raw, vm);
    check_backend(o);
    if (o.page_cache != "auto" && o.page_cache != "keep" && o.page_cache != "evict")
        throw UsageError("--page_cache " + o.page_cache + ": expected auto, keep or evict");
    check_output_choices(o, raw.compress, !vm["compress"].defaulted(), vm);
    if (!o.hf_upload_path.empty() && o.format != "safetensors")
        throw UsageError("--hf_upload_path uploads a Hugging Face folder: it combines with --format safetensors only");
    // HDF5's chunk limit is 4 GiB.
    o.output.chunk_bytes = parse_byte_size(raw.hdf5_chunk, "--hdf5_chunk_size", (4ull << 30) - 1);
    return o;
}

}  // namespace vmerge
