// The C++ interface (include/vmerge/vmerge.hpp): a call is the command run in this process, its
// flags parsed by the command line's own option table, over the process's world (one rank, or
// MPI's ranks when a launcher started the process), with its output captured.
#include <algorithm>
#include <array>
#include <csignal>
#include <mutex>
#include <sstream>

#include <signal.h>

#include "vmerge/vmerge.hpp"

#include "command_line.h"
#include "debug_knobs.h"
#include "driver.h"
#include "exit_code.h"
#include "process_world.h"

namespace vmerge::api {
namespace {

// One world for the life of the process: MPI can be started once only, and ends at exit.
Comm& process_comm() {
    static int argc = 0;
    static char** argv = nullptr;
    static ProcessWorld world(argc, argv);
    return world.comm();
}

// The command line these options stand for: a switch is --name, a value --name=value. A name
// must be a flag name, so that no entry becomes two arguments or a value of another flag.
// ASCII only, whatever locale the caller set (Python sets the user's).
bool is_flag_name(const std::string& name) {
    const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
    return !name.empty() && alnum(name[0]) &&
           std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '_' || c == '-'; });
}

std::vector<std::string> command_line_of(const std::string& command, const Options& options) {
    std::vector<std::string> args{"vmerge-mpi"};
    if (!command.empty()) args.push_back(command);
    for (const auto& [name, value] : options) {
        if (!is_flag_name(name))
            throw UsageError("option '" + name + "': expected a flag name (letters, digits, _ and -, no dashes before it)");
        if (value == "false") continue;
        args.push_back(value == "true" ? "--" + name : "--" + name + "=" + value);
    }
    return args;
}

// A merge handles SIGINT, SIGTERM and SIGHUP to remove its target lock (output/target_guard.h),
// which suits the command; a call must leave the caller's handlers as they were after it (Python's
// KeyboardInterrupt, a trainer's SIGTERM handling).
class CallersSignalHandlers {
public:
    CallersSignalHandlers() {
        for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], nullptr, &saved_[i]);
    }
    ~CallersSignalHandlers() {
        for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &saved_[i], nullptr);
    }
    CallersSignalHandlers(const CallersSignalHandlers&) = delete;
    CallersSignalHandlers& operator=(const CallersSignalHandlers&) = delete;

private:
    static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
    std::array<struct sigaction, 3> saved_{};
};

std::string without_trailing_newlines(std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

}  // namespace

Result run(const std::string& command, const Options& options, const ProgressCallback& progress) {
    // One call at a time: a merge's lock and interrupt note are the process's (target_guard.h), and
    // so are the signal handlers kept above.
    static std::mutex one_call;
    const std::lock_guard<std::mutex> serialised(one_call);
    const CallersSignalHandlers callers_handlers;
    CallHooks hooks;
    hooks.progress = progress;
    std::ostringstream out, err;
    int code = kExitSuccess;
    try {
        const std::vector<std::string> args = command_line_of(command, options);
        std::vector<const char*> argv;
        for (const auto& a : args) argv.push_back(a.c_str());
        auto parsed = parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
        if (!parsed) return Result{kExitSuccess, "{}", ""};  // --help, --version: nothing to run
        parsed->debug = read_debug_knobs();
        parsed->hooks = &hooks;
        Comm& comm = process_comm();
        code = run_command(*parsed, comm, out, err);
    } catch (const UsageError& e) {
        throw MergeError("vmerge-mpi: usage error: " + std::string(e.what()) + " (see --help)", kExitUsage);
    } catch (const std::exception& e) {  // the world could not start (several processes, no MPI)
        throw MergeError("vmerge-mpi: error: " + std::string(e.what()), kExitFailure);
    }
    const std::string error = without_trailing_newlines(err.str());
    if (code != kExitSuccess && !error.empty()) throw MergeError(error, code);
    return Result{code, hooks.result.is_null() ? "{}" : hooks.result.dump(2), out.str()};
}

Result merge(const Options& options, const ProgressCallback& progress) { return run("merge", options, progress); }
Result test(const Options& options) { return run("test", options); }
Result inspect(const Options& options) { return run("inspect", options); }
Result verify(const Options& options) { return run("verify", options); }
Result watch(const Options& options, const ProgressCallback& progress) { return run("watch", options, progress); }

const char* version() { return VMERGE_VERSION; }

}  // namespace vmerge::api
