#include "watch_command.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "collective_step.h"
#include "core/error.h"
#include "exit_code.h"
#include "io/input_tree.h"
#include "io/object_url.h"
#include "output/registry.h"
#include "watch_target.h"
#include "watch/run_folder.h"

namespace vmerge {
namespace {

// What rank 0 found in one look at the run, for every rank.
struct StepToDo {
    RunStep step;
    std::string target;
    bool merged = false;  // a vmerge output is there already
    bool resume = false;  // an interrupted merge left its staging folder
};

std::vector<StepToDo> look_at_run(const WatchOptions& w) {
    std::vector<StepToDo> todo;
    forget_input_listings();  // a bucket's run folder changes between looks: list it afresh
    for (RunStep& step : find_run_steps(w.root, w.rules)) {
        StepToDo t;
        t.target = join_path(w.target_root, step.name);
        const StepOutputState state = step_output_state(t.target);
        t.merged = state.merged;
        t.resume = state.interrupted;
        t.step = std::move(step);
        todo.push_back(std::move(t));
    }
    return todo;
}

std::string to_text(const std::vector<StepToDo>& todo) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& t : todo)
        j.push_back({t.step.step, t.step.name, t.step.checkpoint_dir, t.step.complete, t.step.why, t.target, t.merged,
                     t.resume});
    return j.dump();
}

std::vector<StepToDo> from_text(const std::string& text) {
    std::vector<StepToDo> todo;
    for (const auto& e : nlohmann::json::parse(text)) {
        StepToDo t;
        t.step = {e[0].get<int64_t>(), e[1].get<std::string>(), e[2].get<std::string>(), e[3].get<bool>(),
                  e[4].get<std::string>()};
        t.target = e[5].get<std::string>();
        t.merged = e[6].get<bool>();
        t.resume = e[7].get<bool>();
        todo.push_back(std::move(t));
    }
    return todo;
}

// Rank 0 looks, every rank gets the same list (and forgets the store listings it kept from the
// last pass, which a merge of a new step must not read).
std::vector<StepToDo> shared_look(const WatchOptions& w, Comm& comm) {
    forget_input_listings();
    std::string text;
    collective_step(comm, "look at the run", [&] {
        if (comm.rank() == 0) text = to_text(look_at_run(w));
    });
    comm.broadcast(text, 0);
    return from_text(text);
}

// --keep_last K: merged outputs of older steps removed, newest K kept. Only folders vmerge
// wrote (classify_target: a manifest listing every entry) are ever removed.
void remove_old_outputs(const WatchOptions& w, const std::vector<StepToDo>& todo, std::ostream& out) {
    if (w.keep_last <= 0) return;
    std::vector<const StepToDo*> merged;
    for (const auto& t : todo)
        if (t.merged) merged.push_back(&t);
    for (size_t i = 0; i + static_cast<size_t>(w.keep_last) < merged.size(); ++i) {
        remove_step_output(merged[i]->target);
        out << "vmerge watch: " << merged[i]->step.name << ": removed (--keep_last " << w.keep_last << ")" << std::endl;
    }
}

// `previous`: the newest earlier step's output ("" none), which the merge reuses unless this
// step resumes (--reuse and --resume exclude each other), --no_reuse, the format cannot, or the
// steps go to a bucket (no hard links there; docs/cluster.md).
Options step_options(const Options& o, const StepToDo& t, const std::string& previous) {
    Options step = o;
    step.command = "merge";
    step.local_dir = t.step.checkpoint_dir;
    step.level = {};  // the watcher found the role folder itself
    step.output.target = t.target;
    step.output.resume = t.resume;
    const OutputFormatInfo* format = find_output_format(o.format);
    if (!t.resume && !o.watch.no_reuse && format && format->reusable && !is_object_url(t.target))
        step.output.reuse = previous;
    return step;
}

// What a look that found no step says, once until steps appear: what was looked for, and what
// the root holds instead (a user who named a step or role folder sees its contents).
std::string nothing_found_line(const WatchOptions& w) {
    std::vector<std::string> names;
    for (const FolderEntry& entry : list_input_folder(w.root)) names.push_back(entry.name);
    std::string found;
    for (size_t i = 0; i < names.size() && i < 8; ++i) found += (i ? ", " : "") + names[i];
    if (names.size() > 8) found += ", and " + std::to_string(names.size() - 8) + " more";
    return "vmerge watch: no checkpoint step under " + w.root +
           " yet (looked for verl global_step_N/, Megatron-LM iter_NNNNNNN/, DCP step-N/, DeepSpeed global_stepN/, "
           "HF Trainer checkpoint-N/; found " + (names.empty() ? std::string("nothing") : found) + ")" +
           (w.once ? "" : "; still watching");
}

// One line per merged step, after the merge's own report (which says what --reuse reused).
std::string step_summary(const StepToDo& t, const Options& step, std::chrono::steady_clock::duration took) {
    std::ostringstream line;
    line << "vmerge watch: " << t.step.name << ": merged in " << std::fixed << std::setprecision(1)
         << std::chrono::duration<double>(took).count() << " s";
    if (!step.output.reuse.empty()) line << ", compared with " << step.output.reuse << " (--reuse)";
    if (step.output.resume) line << " (resumed)";
    return line.str();
}

}  // namespace

int run_watch(const Options& o, Comm& comm, std::ostream& out, std::ostream& err, const StepMerge& merge) {
    const WatchOptions& w = o.watch;
    std::optional<WatchTargetLock> lock;  // rank 0: one watcher per target root
    collective_step(comm, "check --target_root", [&] {
        if (comm.rank() == 0) lock.emplace(w);
    });
    std::set<std::string> failed;       // steps whose merge failed: not retried by this watcher
    std::map<std::string, std::string> told;  // what was last said of each waiting step
    const bool speak = comm.rank() == 0 && !o.quiet;
    // Every line flushed as it is said: stdout to a file (a Slurm log) is block-buffered, and a
    // watcher is ended by a signal, which loses what the buffer held.
    auto say = [&](const std::string& line) {
        if (speak) out << line << std::endl;
    };
    bool said_empty = false;
    while (true) {
        const std::vector<StepToDo> todo = shared_look(w, comm);
        if (todo.empty() && !said_empty) say(nothing_found_line(w));
        said_empty = todo.empty();
        std::string previous;  // the newest merged output so far, oldest step first
        for (const StepToDo& t : todo) {
            if (t.merged) {
                previous = t.target;
                if (told[t.step.name] != "merged")
                    say("vmerge watch: " + t.step.name + ": skipped (merged already: " + t.target + ")");
                told[t.step.name] = "merged";
                continue;
            }
            if (failed.count(t.step.name)) continue;
            if (!t.step.complete) {
                if (told[t.step.name] != t.step.why)
                    say("vmerge watch: " + t.step.name + ": waiting (" + t.step.why + ")");
                told[t.step.name] = t.step.why;
                continue;
            }
            say("vmerge watch: " + t.step.name + ": " + (t.resume ? "resuming" : "merging") + " " +
                t.step.checkpoint_dir + " (" + t.step.why + ") into " + t.target);
            try {
                const Options step = step_options(o, t, previous);
                const auto start = std::chrono::steady_clock::now();
                merge(step);
                previous = t.target;
                say(step_summary(t, step, std::chrono::steady_clock::now() - start));
            } catch (const std::exception& e) {
                if (comm.rank() == 0) err << "vmerge-mpi: error: " << t.step.name << ": " << e.what() << std::endl;
                failed.insert(t.step.name);
            }
        }
        collective_step(comm, "remove old outputs", [&] {
            if (comm.rank() == 0) remove_old_outputs(w, look_at_run(w), out);
        });
        if (w.once) break;
        std::this_thread::sleep_for(std::chrono::seconds(w.every_seconds));
    }
    return failed.empty() ? kExitSuccess : kExitFailure;
}

}  // namespace vmerge
