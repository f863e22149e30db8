#include <algorithm>
#include <filesystem>
#include <map>

#include "core/text_pattern.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"
#include "formats/deepspeed/deepspeed_checkpoint.h"
#include "io/input_file.h"
#include "io/pointer_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const TextPattern kOptimFile(R"((bf16_|fp16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt)");
const TextPattern kRankModelFile(R"(zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt)");
const TextPattern kModelFile(R"(mp_rank_(\d+)_model_states\.pt)");

// A rank number in a file name (any count of digits matches the patterns above), bounded.
long rank_in_name(const std::string& digits, const fs::path& file) {
    const auto rank = parse_int_within(digits, 0, kMaxWorldSize);
    if (!rank) throw Error(file.string() + ": rank " + digits + " in the file name is not within " + range_text(0, kMaxWorldSize));
    return static_cast<long>(*rank);
}
const TextPattern kExpertFile(R"((layer_\d+_expert_\d+_mp_rank_\d+_model_states|expp_rank_\d+_mp_rank_\d+_optim_states)\.pt)");
// PipelineModule.ckpt_layer_path: layer_<idx:02d>, then the rank's coordinates on the axes other
// than data and pipe (none for PipeDataParallelTopology, "-model_00" with a tensor-parallel axis).
const TextPattern kLayerFile(R"(layer_\d+(-[A-Za-z]+_\d+)*-model_states\.pt)");

bool has_optim_files(const fs::path& dir) {
    for (const auto& e : list_input_folder(dir.string()))
        if (kOptimFile.full_match(e.name)) return true;
    return false;
}

// The ranks' files named by `pattern` (rank = sub-match 2 for optim files, 1 for model
// files), by rank number: rank 10 after rank 2, whatever the text order.
using RankFiles = std::map<long, std::string>;

void refuse_unsupported(const fs::path& tag_dir, const std::string& name, long mp) {
    const std::string path = (tag_dir / name).string();
    if (kExpertFile.full_match(name))
        throw Error(path + ": a DeepSpeed MoE expert file; expert-parallel DeepSpeed checkpoints are not supported");
    if (mp > 0)
        throw Error(path + ": model-parallel rank " + std::to_string(mp) +
                    "; tensor/pipeline-parallel DeepSpeed checkpoints (mp_rank > 00) are not supported, only mp_rank_00");
}

// The tag folder's file names, sorted, so that what is refused first is the same on every run.
std::vector<std::string> sorted_names(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : list_input_folder(dir)) names.push_back(e.name);
    std::sort(names.begin(), names.end());
    return names;
}

// A pipeline-parallel save keeps the weights in PipelineModule's per-layer files (the model-states
// and optimizer files beside them hold no module): zero_to_fp32 stops at the first of them
// ("is not a model state checkpoint"); this names them all.
void refuse_pipeline_layers(const fs::path& tag_dir, const std::vector<std::string>& names) {
    std::vector<std::string> layers;
    for (const auto& name : names)
        if (kLayerFile.full_match(name)) layers.push_back(name);
    if (layers.empty()) return;
    std::string listed;
    for (size_t i = 0; i < layers.size() && i < 4; ++i) listed += (i ? ", " : "") + layers[i];
    if (layers.size() > 4) listed += ", ...";
    throw Error((tag_dir / layers[0]).string() + ": a DeepSpeed pipeline-engine layer file (" + std::to_string(layers.size()) +
                " in the tag folder: " + listed + "); pipeline-parallel DeepSpeed checkpoints are not supported");
}

// The rank files of a tag folder, with the gaps and duplicates named.
std::vector<std::string> ordered(const RankFiles& files, const fs::path& tag_dir, const std::string& example) {
    std::vector<std::string> out;
    long expected = 0;
    for (const auto& [rank, path] : files) {
        if (rank != expected)
            throw Error((tag_dir / TextPattern("RANK").replace_all(example, std::to_string(expected))).string() +
                        ": missing (the folder has ranks up to " + std::to_string(files.rbegin()->first) + ")");
        out.push_back(path);
        ++expected;
    }
    return out;
}

}  // namespace

bool looks_like_deepspeed(const std::string& dir) {
    return path_exists(join_path(dir, "latest")) || path_exists(join_path(dir, "latest_universal")) || has_optim_files(dir);
}

DeepSpeedCheckpoint discover_deepspeed(const std::string& dir, const std::optional<std::string>& tag) {
    DeepSpeedCheckpoint c;
    const fs::path d(dir);
    c.save_dir = dir;
    c.tag_dir = "";
    if (tag) {
        c.tag = *tag;
    } else if (path_exists(join_path(dir, "latest"))) {
        c.tag = read_pointer_file(d.string(), "latest", "DeepSpeed latest file");
        if (c.tag.empty()) throw Error((d / "latest").string() + ": empty (it should name the checkpoint's tag)");
    } else if (path_exists(join_path(dir, "latest_universal"))) {
        throw Error((d / "latest_universal").string() + ": a DeepSpeed universal checkpoint; universal checkpoints are "
                                                         "not supported (merge the ZeRO checkpoint it was made from)");
    } else if (has_optim_files(d) && is_object_url(dir)) {
        c.tag = name_of(dir);  // the tag folder itself was given
        c.save_dir = parent_of(dir);
        c.tag_dir = dir;
    } else if (has_optim_files(d)) {
        fs::path folder = fs::absolute(d).lexically_normal();  // the tag folder itself was given
        if (folder.filename().empty()) folder = folder.parent_path();
        c.tag = folder.filename().string();
        c.save_dir = folder.parent_path().string();
        c.tag_dir = dir;
    } else {
        throw Error(dir + ": no DeepSpeed 'latest' file and no *_optim_states.pt");
    }
    if (c.tag_dir.empty()) c.tag_dir = join_path(dir, c.tag);
    if (c.tag.find('/') != std::string::npos || c.tag == ".." || c.tag == ".")
        throw Error(dir + ": tag '" + c.tag + "' is not a folder name");
    if (!is_folder(c.tag_dir))
        throw Error(c.tag_dir + ": missing (" + (tag ? std::string("--tag ") : (d / "latest").string() + " names tag ") +
                    "'" + c.tag + "')");
    if (path_exists(join_path(c.tag_dir, "offloaded_tensors")))
        throw Error((fs::path(c.tag_dir) / "offloaded_tensors").string() +
                    ": NVMe optimizer offload; its fp32 masters live in swap files, which are not supported");
    const std::vector<std::string> names = sorted_names(c.tag_dir);
    refuse_pipeline_layers(c.tag_dir, names);
    RankFiles optim, rank_models, models;
    for (const std::string& name : names) {
        const fs::path path = fs::path(c.tag_dir) / name;
        TextMatch m;
        if (kOptimFile.full_match(name, m)) {
            refuse_unsupported(c.tag_dir, name, rank_in_name(m[3], path));
            if (!optim.emplace(rank_in_name(m[2], path), path.string()).second)
                throw Error(path.string() + ": a second optimizer file for rank " + m[2]);
        } else if (kRankModelFile.full_match(name, m)) {
            refuse_unsupported(c.tag_dir, name, rank_in_name(m[2], path));
            if (!rank_models.emplace(rank_in_name(m[1], path), path.string()).second)
                throw Error(path.string() + ": a second model-states file for rank " + m[1]);
        } else if (kModelFile.full_match(name, m)) {
            refuse_unsupported(c.tag_dir, name, rank_in_name(m[1], path));
            if (!models.emplace(0, path.string()).second)
                throw Error(path.string() + ": a second mp_rank_00 model-states file (" + models[0] + ")");
        } else {
            refuse_unsupported(c.tag_dir, name, 0);
        }
    }
    if (optim.empty()) throw Error(c.tag_dir + ": no *zero_pp_rank_*_mp_rank_00_optim_states.pt files");
    const std::string prefix = fs::path(optim.begin()->second).filename().string().starts_with("bf16_") ? "bf16_" : "";
    c.optim_files = ordered(optim, c.tag_dir, prefix + "zero_pp_rank_RANK_mp_rank_00_optim_states.pt");
    c.per_rank_model_files = !rank_models.empty();
    if (c.per_rank_model_files) {
        c.model_files = ordered(rank_models, c.tag_dir, "zero_pp_rank_RANK_mp_rank_00_model_states.pt");
        if (c.model_files.size() != c.optim_files.size())
            throw Error(c.tag_dir + ": " + std::to_string(c.optim_files.size()) + " optimizer files but " +
                        std::to_string(c.model_files.size()) + " zero_pp_rank_*_model_states.pt files");
    } else if (!models.empty()) {
        c.model_files = {models.begin()->second};
    } else {
        throw Error((fs::path(c.tag_dir) / "mp_rank_00_model_states.pt").string() + ": missing (no model-states file)");
    }
    return c;
}

}  // namespace vmerge
