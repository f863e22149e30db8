#include "formats/checkpoint_level.h"

#include <algorithm>
#include <filesystem>

#include "core/text_pattern.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_file.h"
#include "io/pointer_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const TextPattern kStepFolder(R"(global_step_(\d+))");
// The role folders verl's trainer saves into a step folder.
const std::vector<std::string> kRoles{"actor", "critic"};

std::string list_text(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names) text += (text.empty() ? "" : ", ") + n + "/";
    return text.empty() ? "none" : text;
}

std::vector<std::string> step_folders(const FolderListing& listing) {
    std::vector<std::string> steps;
    for (const auto& name : listing.subfolders)
        if (kStepFolder.full_match(name)) steps.push_back(name);
    std::sort(steps.begin(), steps.end());
    return steps;
}

// The run folder's step: `step`, else the tracker's number (verl writes it as decimal text).
int chosen_step(const std::string& dir, const FolderListing& listing, std::optional<int> step,
                const std::vector<std::string>& steps) {
    if (step) return *step;
    const std::string tracker = join_path(dir, "latest_checkpointed_iteration.txt");
    if (!listing.tracker)
        throw Error(dir + ": a verl run folder (" + list_text(steps) + ") without latest_checkpointed_iteration.txt; "
                    "pass --step N to choose a step");
    std::string text = *listing.tracker;
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    const auto value = parse_int_within(text, 0, kMaxIteration);
    if (!value) throw Error(tracker + ": expected the step as a whole number, found " + shown_text(text));
    return static_cast<int>(*value);
}

std::vector<std::string> roles_in(const FolderListing& listing) {
    std::vector<std::string> roles;
    for (const auto& r : kRoles)
        if (std::find(listing.subfolders.begin(), listing.subfolders.end(), r) != listing.subfolders.end())
            roles.push_back(r);
    return roles;
}

}  // namespace

CheckpointLevel resolve_checkpoint_level(const std::string& dir, std::optional<int> step, const std::string& role,
                                         const FolderLister& list) {
    CheckpointLevel level{dir, {}};
    FolderListing listing = list(dir);
    const std::vector<std::string> steps = step_folders(listing);
    if (!steps.empty()) {
        const int n = chosen_step(dir, listing, step, steps);
        const std::string name = "global_step_" + std::to_string(n);
        if (std::find(steps.begin(), steps.end(), name) == steps.end())
            throw Error(join_path(dir, name) + ": missing (" + (step ? "--step " + std::to_string(n)
                                                                     : "latest_checkpointed_iteration.txt names step " +
                                                                           std::to_string(n)) +
                        "; the run folder has " + list_text(steps) + ")");
        level.dir = join_path(dir, name);
        level.steps.push_back("run folder " + dir + ": " +
                              (step ? "--step " + std::to_string(n) : "latest_checkpointed_iteration.txt names step " +
                                                                          std::to_string(n)) +
                              " -> " + name + "/");
        listing = list(level.dir);
    } else if (step) {
        throw Error("--step " + std::to_string(*step) + ": " + dir +
                    " is not a verl run folder (no global_step_N/ subfolders)");
    }
    const std::vector<std::string> roles = roles_in(listing);
    if (!role.empty()) {
        if (std::find(listing.subfolders.begin(), listing.subfolders.end(), role) == listing.subfolders.end())
            throw Error("--role " + role + ": " + level.dir + " has no " + role + "/ (role folders there: " +
                        list_text(roles) + ")");
        level.dir = join_path(level.dir, role);
        level.steps.push_back("--role " + role + " -> " + level.dir);
    } else if (roles.size() == 1) {
        level.dir = join_path(level.dir, roles[0]);
        level.steps.push_back("step folder: its one role folder -> " + level.dir);
    } else if (roles.size() > 1) {
        throw Error(level.dir + ": holds the checkpoints of " + std::to_string(roles.size()) + " roles (" +
                    list_text(roles) + "); pass --role " + roles[0] + " or --role " + roles[1] +
                    " to choose one (or point --local_dir at the role folder)");
    }
    return level;
}

bool is_run_folder(const FolderListing& listing) { return !step_folders(listing).empty(); }

FolderListing list_folder(const std::string& dir) {
    FolderListing listing;
    listing.exists = is_folder(dir);
    if (!listing.exists) return listing;
    bool has_tracker = false;
    for (const auto& entry : list_input_folder(dir)) {
        if (entry.is_folder) listing.subfolders.push_back(entry.name);
        has_tracker = has_tracker || entry.name == "latest_checkpointed_iteration.txt";
    }
    std::sort(listing.subfolders.begin(), listing.subfolders.end());
    if (has_tracker || path_exists(join_path(dir, "latest_checkpointed_iteration.txt"))) listing.tracker = read_pointer_file(dir, "latest_checkpointed_iteration.txt", "the checkpoint tracker");
    return listing;
}

}  // namespace vmerge
