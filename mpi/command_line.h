#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "call_hooks.h"
#include "debug_knobs.h"
#include "formats/checkpoint.h"
#include "formats/registry.h"
#include "mapping/lora_adapter.h"
#include "mapping/quantization.h"
#include "output/output_format.h"
#include "watch/run_folder.h"

namespace vmerge {

// What the command line asks for. The option table (command_line.cpp) writes each stage's
// own options struct directly: MapOptions (formats), QuantizeSpec (mapping), LoraOptions
// (mapping) and OutputOptions (output); the driver adds what only it knows (rank, budget).
struct Options {
    std::string command;          // merge | test | inspect | verify | watch | map
    // Discover.
    std::string backend = "auto";
    std::string local_dir;
    std::string hf_config;        // default <local_dir>/huggingface
    LevelChoice level;             // verl run/step folders: --step, --role
    BackendFlags backend_flags;    // the layouts' own flags (--iteration, --tag, --lora_base, ...)
    std::string dtype = "auto";
    bool tie_word_embedding = false;  // --tie_word_embedding: no lm_head.weight is written
    MapOptions map;
    // Quantize (--quantize) and LoRA.
    bool quantize = false;
    QuantizeSpec quantize_spec;
    LoraOptions lora;
    // Write.
    std::string format = "safetensors";  // merge output: safetensors | hdf5
    OutputOptions output = [] {
        OutputOptions defaults;
        defaults.max_shard_size = 5'000'000'000;  // --max_shard_size 5GB
        defaults.chunk_bytes = 4ull << 20;       // --hdf5_chunk_size 4MiB
        return defaults;
    }();
    std::string hf_upload_path;  // after the merge: upload the target to this Hub repo
    bool hf_upload_private = false;
    // Run.
    uint64_t max_memory = 0;      // 0: auto, see default_max_memory
    bool low_cpu_mem_usage = false;  // verl's flag: a small automatic budget
    bool quiet = false;
    int progress = -1;            // seconds between progress lines; -1: auto, 0: off
    std::string log_json;         // per-rank timings for tuning
    std::string page_cache = "auto";  // auto | keep | evict (io/page_cache.h)
    // test, inspect.
    std::string test_hf_dir;
    double atol = 0.0;
    double rtol = 0.0;
    int np = 0;                   // inspect: plan for this many ranks (0 = the running size)
    bool json = false;
    std::string simulate;  // inspect without files: "fsdp:1024", "megatron:tp8,pp16,ep8"
    WatchOptions watch;  // the watch command
    std::string map_base;  // map: the Hugging Face model the checkpoint was trained from
    std::string map_out;   // map: where the learned table is written ("": stdout)
    bool suggest_table = false;  // inspect: map's proposal instead of the merge plan
    DebugKnobs debug;    // set by main from the environment (tests and benchmarks only)
    CallHooks* hooks = nullptr;  // a library call's result and progress (call_hooks.h); null for the command
    bool merge_lora() const { return lora.mode == LoraMode::Merge; }
};

// Parses argv. verl's spellings are accepted as they are, and every --long-option works with
// dashes or underscores. Returns nullopt after printing help/version; throws UsageError.
std::optional<Options> parse_command_line(int argc, const char* const* argv, bool print_help);

// Largest size a flag accepts (1 PiB): far above any node's memory or a shard's size.
inline constexpr uint64_t kMaxFlagBytes = uint64_t{1} << 50;

// "5GB" (10^9), "5GiB" (2^30), "500MB", "1024", Slurm's "128M" (MiB): bytes, from 1 to
// `max_bytes`; UsageError naming `flag` and the text otherwise (nan, inf, negative, 0).
uint64_t parse_byte_size(const std::string& text, const std::string& flag = "size",
                         uint64_t max_bytes = kMaxFlagBytes);

class UsageError : public std::exception {
public:
    explicit UsageError(std::string message) : message_(std::move(message)) {}
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

}  // namespace vmerge
