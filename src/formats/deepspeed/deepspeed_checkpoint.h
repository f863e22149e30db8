#pragma once
#include <optional>
#include <string>
#include <vector>

// A DeepSpeed ZeRO checkpoint folder as DeepSpeedEngine.save_checkpoint leaves it
// (docs/reference/deepspeed-formats.md §1): <save_dir>/latest naming the tag, <save_dir>/<tag>/
// with one optimizer file per data-parallel rank and one model-states file (ZeRO-1/2) or one per
// rank (ZeRO-3). HF Trainer's checkpoint-N/ and accelerate's save_state folder are such a save_dir.
namespace vmerge {

struct DeepSpeedCheckpoint {
    std::string save_dir;  // the folder holding `latest` (or the tag folder itself)
    std::string tag;
    std::string tag_dir;
    std::vector<std::string> optim_files;  // by rank number
    std::vector<std::string> model_files;  // one (mp_rank_00_model_states.pt) or one per rank
    bool per_rank_model_files = false;     // zero_pp_rank_*_model_states.pt (ZeRO-3)
};

// True when `dir` looks like a DeepSpeed save_dir (a `latest` beside a tag folder of
// *_optim_states.pt) or a tag folder itself.
bool looks_like_deepspeed(const std::string& dir);

// Resolves the tag (`tag`, else the text of <dir>/latest) and lists the rank files ordered by
// their rank number. Error, naming the file or the thing, for a missing tag folder, a gap in
// the ranks, and what vmerge does not merge: universal checkpoints, MoE expert files, tensor
// or pipeline parallel saves (mp_rank > 00, layer files), NVMe offload folders.
DeepSpeedCheckpoint discover_deepspeed(const std::string& dir, const std::optional<std::string>& tag);

}  // namespace vmerge
