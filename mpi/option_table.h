#pragma once
#include <map>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "command_line.h"

namespace vmerge {
namespace po = boost::program_options;

// Flags whose text becomes a typed Options field once every flag is parsed.
struct RawFlags {
    std::string max_shard = "5GB", max_memory = "auto", compress = "none", hdf5_chunk = "4MiB";
    std::string quantize_ignore;
    std::string quantize;  // the --quantize scheme ("int" when given alone)
    std::string scale_format;  // --scale_format (block FP8): "float" or "ue8m0"; empty when not given
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
    po::options_description quantizing{"Quantized output (int pack-quantized, block FP8, FP8_BLOCK, FP8_DYNAMIC, NVFP4, MXFP4; for vLLM)"};
    po::options_description lora{"LoRA adapters (PEFT-wrapped FSDP/DCP state dicts, Megatron adapter checkpoints)"};
    po::options_description run{"Running"};
    po::options_description testing{"test"};
    po::options_description inspecting{"inspect"};
    po::options_description watching{"watch (every merge option applies to each step)"};
    po::options_description mapping{"map"};
};

// One command: its name, its lines in `vmerge-mpi --help`, and the option groups it takes, in
// the order `COMMAND --help` shows them.
struct CommandInfo {
    std::string name;
    std::vector<std::string> help;
    std::vector<po::options_description OptionTable::*> groups;
    // Its own usage line atop `COMMAND --help` ("--target_dir DIR"): the flag it names is taken
    // although another group holds it. "" when none.
    std::string usage = "";
};

// The command named `name` in the table of commands (option_table.cpp, in --help order: the one
// table that the help text, the unknown-command check and the check refusing a flag the command
// would not use all read); nullptr when there is none.
const CommandInfo* find_command(const std::string& name);
// The names for a message: merge, test, inspect, verify or watch.
std::string command_names();

// Every flag, bound to its field of `o` or `raw` (both must outlive the table).
OptionTable option_table(Options& o, RawFlags& raw);
// Every group, for parsing and for the help of no command.
po::options_description visible_options(const OptionTable& t);

// A flag given that `command` does not take is refused, never ignored (`merge --np 4`):
// UsageError "--np applies to inspect, not merge".
void refuse_flags_not_taken(const OptionTable& t, const std::string& command, const po::variables_map& vm);

// The command list, then the groups `command` takes (every group for none or an unknown one).
void print_help(const OptionTable& t, const std::string& command);

}  // namespace vmerge
