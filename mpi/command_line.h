#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vmerge {

struct Options {
    std::string command;          // merge | test | inspect | verify
    std::string backend = "auto";
    std::string local_dir;
    std::string target_dir;
    std::string hf_config;        // default <local_dir>/huggingface
    std::string test_hf_dir;
    std::string dtype = "auto";
    uint64_t max_shard_size = 5'000'000'000;
    uint64_t max_memory = 0;      // 0: auto, see default_max_memory
    bool low_cpu_mem_usage = false;  // verl's flag: a small automatic budget
    bool force = false;
    bool tie_word_embedding = false;
    bool is_value_model = false;
    bool json = false;
    bool quiet = false;
    double atol = 0.0;
    double rtol = 0.0;
    int np = 0;                   // inspect: plan for this many ranks (0 = the running size)
    int progress = -1;            // seconds between progress lines; -1: auto, 0: off
    std::string log_json;         // per-rank timings for tuning
    std::optional<int> tp_size;
    std::optional<int> pp_size;
    std::optional<int> iteration;  // Megatron-LM: another iteration than the tracker's
    bool allow_unmapped = false;
    std::vector<std::string> architecture_tables;  // --architecture_table: name tables to add or override
    bool drop_mtp = false;  // leave Megatron multi-token prediction layers out of the output
    bool resume = false;
    std::string simulate;  // inspect without files: "fsdp:1024", "megatron:tp8,pp16,ep8"
    bool quantize = false;
    int bits = 4;
    int64_t group_size = 128;
    bool asymmetric = false;
    std::vector<std::string> quantize_ignore;
    bool allow_unsupported_quantization = false;
    bool merge_lora = false;          // fold a LoRA adapter in (default: extract it)
    std::optional<double> lora_alpha;
    bool use_rslora = false;
    std::string lora_base;            // Megatron adapter checkpoints: the HF base model folder
    std::string format = "safetensors";  // merge output: safetensors | hdf5
    int zstd_level = 0;                  // --compress zstd[:LEVEL] (hdf5); 0: uncompressed
    uint64_t hdf5_chunk_size = 4ull << 20;  // bytes per compressed chunk (whole rows)
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
