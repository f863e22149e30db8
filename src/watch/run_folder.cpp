#include "watch/run_folder.h"

#include <algorithm>
#include <chrono>

#include "core/text_pattern.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_folder.h"
#include "io/input_file.h"
#include "io/input_tree.h"
#include "io/pointer_file.h"
#include "io/json_file.h"

namespace vmerge {
namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";

// An FSDP role folder without a marker: every rank file of its world size present (from
// fsdp_config.json, else the file names) and none changed within the settle time.
// (A store object's time is its LastModified: when its upload completed.)
void settle_fsdp(const std::string& dir, const RunFolderRules& rules, RunStep& step) {
    static const TextPattern rank_file(R"(model_world_size_(\d+)_rank_(\d+)\.pt)");
    int64_t world = 0, newest = 0;
    std::vector<int64_t> ranks;
    for (const FolderEntry& entry : list_input_folder(dir)) {
        TextMatch m;
        if (entry.is_folder || !rank_file.full_match(entry.name, m)) continue;
        world = std::max<int64_t>(world, parse_int_within(m[1], 1, 1 << 20).value_or(0));
        ranks.push_back(parse_int_within(m[2], 0, 1 << 20).value_or(-1));
        newest = std::max(newest, input_modified_seconds(join_path(dir, entry.name)).value_or(0));
    }
    const std::string config = join_path(dir, "fsdp_config.json");
    if (entry_kind(config) == EntryKind::file) {
        const auto json = read_json_file(config);
        if (json.is_object() && json.contains("world_size"))
            world = json_int_within(json["world_size"], 1, 1 << 20, config + ": world_size");
        newest = std::max(newest, input_modified_seconds(config).value_or(0));
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    if (world == 0) {
        step.why = "no model_world_size_*_rank_*.pt files yet";
        return;
    }
    if (static_cast<int64_t>(ranks.size()) < world || ranks.front() != 0 || ranks.back() != world - 1) {
        step.why = std::to_string(ranks.size()) + " of " + std::to_string(world) + " rank files present";
        return;
    }
    const int64_t age = rules.now_seconds - newest;
    if (age < rules.settle_seconds) {
        step.why = "all " + std::to_string(world) + " rank files present, last changed " + std::to_string(age) +
                   " s ago (settle time " + std::to_string(rules.settle_seconds) + " s)";
        return;
    }
    step.complete = true;
    step.why = "all " + std::to_string(world) + " rank files present and unchanged for " + std::to_string(age) + " s";
}

void judge_verl_step(const std::string& role_dir, std::optional<int64_t> tracker, const RunFolderRules& rules,
                     RunStep& step) {
    const std::string model = join_path(role_dir, "model");
    const bool layout_v2 = path_exists(join_path(model, "dist_ckpt")) || path_exists(join_path(model, "huggingface"));
    if (path_exists(join_path(role_dir, "ckpt_contents.json"))) {
        step.complete = true;
        step.why = "ckpt_contents.json present (verl writes it last)";
    } else if (layout_v2) {
        step.why = "layout v2 without ckpt_contents.json (the save has not finished)";
    } else if (tracker && *tracker >= step.step) {
        step.complete = true;
        step.why = std::string(kTracker) + " says " + std::to_string(*tracker);
    } else {
        settle_fsdp(role_dir, rules, step);
    }
}

// The number in a DeepSpeed tag global_stepN or best_global_stepN; nullopt for other tags.
std::optional<int64_t> deepspeed_tag_step(const std::string& tag) {
    static const TextPattern numbered(R"((?:best_)?global_step(\d+))");
    TextMatch m;
    if (!numbered.full_match(tag, m)) return std::nullopt;
    return parse_int_within(m[1], 0, int64_t{1} << 40);
}

// A DeepSpeed tag folder of a save_dir: rank 0 writes save_dir/latest with the tag after every
// rank saved, and saves follow one another, so a tag is complete when `latest` names it or a
// later numbered tag.
void judge_deepspeed_tag(const std::string& root, const std::string& tag, RunStep& step) {
    if (!path_exists(join_path(root, "latest"))) {
        step.why = "no DeepSpeed latest file yet";
        return;
    }
    const std::string named = read_pointer_file(root, "latest", "DeepSpeed latest file");
    const std::optional<int64_t> later = deepspeed_tag_step(named);
    step.complete = named == tag || (later && *later > step.step);
    step.why = "DeepSpeed latest names " + named.substr(0, 80);  // printable: read_pointer_file checked it
}

}  // namespace

std::optional<int64_t> tracker_step(const std::string& dir) {
    const std::string path = join_path(dir, kTracker);
    if (!path_exists(path)) return std::nullopt;
    const std::string text = read_pointer_file(dir, kTracker, "a tracker file");
    if (text == "release") return std::nullopt;
    const auto step = parse_int_within(text, 0, int64_t{1} << 40);
    if (!step) throw Error(path + ": expected a step number or release, found " + shown_text(text));
    return *step;
}

std::vector<RunStep> find_run_steps(const std::string& root, const RunFolderRules& given) {
    RunFolderRules rules = given;
    if (rules.now_seconds == 0)
        rules.now_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    require_input_folder(root, "--root names the training run's checkpoint folder");
    const std::optional<int64_t> tracker = tracker_step(root);
    static const TextPattern verl(R"(global_step_(\d+))"), megatron(R"(iter_(\d+))"), dcp(R"(step-(\d+))"),
        trainer(R"(checkpoint-(\d+))");
    std::vector<RunStep> steps;
    for (const FolderEntry& entry : list_input_folder(root)) {
        if (!entry.is_folder) continue;
        const std::string& name = entry.name;
        const std::string dir = join_path(root, name);
        TextMatch m;
        RunStep step;
        step.name = name;
        if (verl.full_match(name, m)) {
            step.step = parse_int_within(m[1], 0, int64_t{1} << 40).value_or(-1);
            const std::string role_dir = join_path(dir, rules.role);
            step.checkpoint_dir = role_dir;
            if (!is_folder(role_dir)) step.why = "no " + rules.role + "/ folder yet";
            else judge_verl_step(role_dir, tracker, rules, step);
        } else if (megatron.full_match(name, m)) {
            step.step = parse_int_within(m[1], 0, int64_t{1} << 40).value_or(-1);
            step.checkpoint_dir = dir;
            step.complete = tracker && *tracker >= step.step;
            step.why = tracker ? std::string(kTracker) + " says " + std::to_string(*tracker) : "no " + std::string(kTracker) + " yet";
        } else if (dcp.full_match(name, m)) {
            step.step = parse_int_within(m[1], 0, int64_t{1} << 40).value_or(-1);
            step.checkpoint_dir = dir;
            step.complete = path_exists(join_path(dir, ".metadata"));
            step.why = step.complete ? ".metadata present (DCP writes it last)" : "no .metadata yet";
            // torchtitan's last_save_in_hf: safetensors consolidated into step-N/, the index
            // written once consolidation finished (HuggingFaceStorageWriter.finish).
            if (!step.complete && path_exists(join_path(dir, "model.safetensors.index.json"))) {
                step.complete = true;
                step.why = "model.safetensors.index.json present (torchtitan's HF save writes it last)";
            }
        } else if (const auto tag_step = deepspeed_tag_step(name)) {
            step.step = *tag_step;
            step.checkpoint_dir = dir;
            judge_deepspeed_tag(root, name, step);
        } else if (trainer.full_match(name, m)) {
            // transformers.Trainer._save_checkpoint: the model, the optimizer (DeepSpeed's save and
            // its latest), the RNG state, then trainer_state.json.
            step.step = parse_int_within(m[1], 0, int64_t{1} << 40).value_or(-1);
            step.checkpoint_dir = dir;
            step.complete = path_exists(join_path(dir, "trainer_state.json"));
            step.why = step.complete ? "trainer_state.json present (the Trainer writes it last)" : "no trainer_state.json yet";
        } else {
            continue;
        }
        if (step.step >= 0) steps.push_back(std::move(step));
    }
    std::sort(steps.begin(), steps.end(), [](const RunStep& a, const RunStep& b) {
        return std::tie(a.step, a.name) < std::tie(b.step, b.name);
    });
    return steps;
}

}  // namespace vmerge
