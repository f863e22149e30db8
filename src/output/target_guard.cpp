#include "output/target_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWrittenBy = "vmerge-mpi";

std::string this_host() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
    return name;
}

// `inner` equals `outer` or lies below it (both normalised, absolute).
bool within(const fs::path& inner, const fs::path& outer) {
    auto i = inner.begin(), o = outer.begin();
    for (; o != outer.end(); ++o, ++i) {
        if (o->empty()) continue;  // a trailing separator
        if (i == inner.end() || *i != *o) return false;
    }
    return true;
}

fs::path absolute_normal(const std::string& p) {
    fs::path a = fs::absolute(p).lexically_normal();
    if (a.filename().empty()) a = a.parent_path();
    return a;
}

fs::path resolved(const std::string& p) {
    std::error_code ec;
    fs::path r = fs::weakly_canonical(p, ec);
    return ec ? absolute_normal(p) : r.lexically_normal();
}

std::string list_some(const std::vector<std::string>& names, size_t most = 5) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > most) out += " and " + std::to_string(names.size() - most) + " more";
    return out;
}

// The entries of `dir` a manifest does not account for (folders count when a listed file
// lies below them); links are never accounted for.
std::vector<std::string> unlisted_entries(const std::string& dir, const std::set<std::string>& files) {
    std::set<std::string> folders;
    for (const auto& f : files)
        for (fs::path p = fs::path(f).parent_path(); !p.empty(); p = p.parent_path()) folders.insert(p.string());
    std::vector<std::string> out;
    for (const auto& rel : folder_entries(dir)) {
        const fs::file_status st = fs::symlink_status(fs::path(dir) / rel);
        const bool listed = fs::is_directory(st) ? folders.count(rel) > 0 : fs::is_regular_file(st) && files.count(rel) > 0;
        if (!listed) out.push_back(rel);
    }
    return out;
}

}  // namespace

std::string manifest_json(const std::vector<std::string>& files) {
    std::vector<std::string> sorted = files;
    sorted.push_back(kManifestFile);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    return nlohmann::ordered_json{{"written_by", kWrittenBy}, {"files", sorted}}.dump(2) + "\n";
}

std::vector<std::string> folder_entries(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
        out.push_back(it->path().lexically_relative(dir).string());
    if (ec) throw Error(dir + ": cannot list: " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
}

void check_target_placement(const std::string& target, const std::vector<InputFolder>& inputs,
                            const std::string& flag) {
    const fs::path t_lex = absolute_normal(target), t_res = resolved(target);
    for (const auto& input : inputs) {
        if (input.path.empty()) continue;
        const fs::path i_lex = absolute_normal(input.path), i_res = resolved(input.path);
        const char* relation = nullptr;
        if (t_lex == i_lex || t_res == i_res) relation = "is";
        else if (within(i_lex, t_lex) || within(i_res, t_res)) relation = "contains";
        else if (within(t_lex, i_lex) || within(t_res, i_res)) relation = "lies inside";
        if (relation)
            throw Error(flag + " " + target + " " + relation + " " + input.what + " " + input.path +
                        ": a merge never writes into, over or around its inputs; choose a " + flag + " outside it");
    }
}

ExistingTarget classify_target(const std::string& target) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(target, ec);
    if (ec || !fs::exists(st)) return {TargetKind::Absent, ""};
    if (fs::is_symlink(st)) return {TargetKind::Other, "it is a symbolic link"};
    if (!fs::is_directory(st)) return {TargetKind::Other, "it is not a folder"};
    const auto entries = folder_entries(target);
    if (entries.empty()) return {TargetKind::EmptyFolder, ""};
    const std::string manifest = target + "/" + kManifestFile;
    if (!fs::is_regular_file(fs::symlink_status(manifest, ec)))
        return {TargetKind::Other, "it holds files and no " + std::string(kManifestFile) +
                                       " (it is not a vmerge output): " + list_some(entries)};
    std::set<std::string> files;
    try {
        const nlohmann::json j = read_json_file(manifest);
        if (j.value("written_by", "") != kWrittenBy || !j.contains("files") || !j["files"].is_array())
            throw Error(manifest + ": not a vmerge manifest");
        for (const auto& f : j["files"]) files.insert(f.get<std::string>());
    } catch (const std::exception& e) {
        return {TargetKind::Other, std::string("its manifest is unreadable (") + e.what() + ")"};
    }
    const auto extra = unlisted_entries(target, files);
    if (!extra.empty())
        return {TargetKind::Other, "it holds files vmerge did not write (not in its " + std::string(kManifestFile) +
                                       "): " + list_some(extra)};
    return {TargetKind::VmergeOutput, ""};
}

void check_target_replaceable(const std::string& target, bool force) {
    const ExistingTarget existing = classify_target(target);
    switch (existing.kind) {
        case TargetKind::Absent:
        case TargetKind::EmptyFolder:
            return;
        case TargetKind::VmergeOutput:
            if (force) return;
            throw Error(target + ": already exists (an earlier vmerge output); pass --force to replace it");
        case TargetKind::Other:
            break;
    }
    throw Error(target + ": exists and is not replaceable: " + existing.reason +
                "; --force replaces only an empty folder or an earlier vmerge output, so choose another --target_dir "
                "or empty this one yourself");
}

std::string TargetLock::path_for(const std::string& target) {
    const fs::path t = absolute_normal(target);
    return (t.parent_path() / ("." + t.filename().string() + ".vmerge-lock")).string();
}

namespace {

// The lock file's text: "host pid start-time".
std::string read_lock(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return "";
    struct stat info {};
    std::string text(256, '\0');
    ssize_t n = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) ? ::read(fd, text.data(), text.size()) : -1;
    ::close(fd);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return text;
}

bool create_lock(const std::string& path, const std::string& token) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EEXIST) return false;
        throw Error(path + ": cannot create the target's lock file: " + std::strerror(errno));
    }
    const bool written = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
    ::fsync(fd);
    ::close(fd);
    if (!written) throw Error(path + ": cannot write the target's lock file");
    return true;
}

// A merge stopped by SIGINT/SIGTERM/SIGHUP (Ctrl-C, scancel, mpirun passing it on) removes
// its lock on the way out; only SIGKILL leaves a stale one, which the next merge takes over.
char g_lock_path[4096] = {};
char g_interrupt_note[8192] = {};

void remove_lock_and_reraise(int signal) {
    if (g_lock_path[0]) ::unlink(g_lock_path);
    // write(2) only: the one way to print that is safe in a signal handler.
    if (g_interrupt_note[0]) [[maybe_unused]] const auto n = ::write(STDERR_FILENO, g_interrupt_note, std::strlen(g_interrupt_note));
    std::signal(signal, SIG_DFL);
    std::raise(signal);
}

void remove_lock_on_signals(const std::string& path) {
    if (path.size() >= sizeof g_lock_path) return;
    std::memcpy(g_lock_path, path.c_str(), path.size() + 1);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, remove_lock_and_reraise);
}

}  // namespace

void say_on_interrupt(const std::string& text) {
    // The first byte goes last: a signal in between prints nothing rather than half a note.
    g_interrupt_note[0] = '\0';
    if (text.empty()) return;
    const size_t n = std::min(text.size(), sizeof g_interrupt_note - 1);
    std::memcpy(g_interrupt_note + 1, text.data() + 1, n - 1);
    g_interrupt_note[n] = '\0';
    g_interrupt_note[0] = text[0];
}

// A holder on this host whose process is gone left the lock behind when it was killed.
bool lock_holder_is_gone(const std::string& text) {
    char host[256] = {};
    long pid = 0;
    if (std::sscanf(text.c_str(), "%255s %ld", host, &pid) != 2 || pid <= 0) return false;
    if (host != this_host()) return false;
    if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
    // A killed holder whose parent is gone may stay a zombie where nobody reaps it.
    std::FILE* stat = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (!stat) return false;
    char state = 0;
    const bool zombie = std::fscanf(stat, "%*d (%*[^)]) %c", &state) == 1 && (state == 'Z' || state == 'X');
    std::fclose(stat);
    return zombie;
}

std::string lock_holder_token() {
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    return this_host() + " " + std::to_string(::getpid()) + " " + std::to_string(now) + "\n";
}

TargetLock::TargetLock(const std::string& target) : path_(path_for(target)) {
    // The target's parent folders are made as `mkdir -p` would (a merge always did).
    std::error_code ec;
    fs::create_directories(fs::path(path_).parent_path(), ec);
    if (ec) throw Error(fs::path(path_).parent_path().string() + ": cannot create the target's parent folder: " + ec.message());
    acquire(target);
    remove_lock_on_signals(path_);
}

void TargetLock::acquire(const std::string& target) {
    token_ = lock_holder_token();
    if (create_lock(path_, token_)) return;
    const std::string held = read_lock(path_);
    if (lock_holder_is_gone(held)) {
        // Move the stale lock aside (one taker wins the rename), check it is the one judged stale.
        const std::string aside = path_ + ".stale-" + std::to_string(::getpid());
        if (::rename(path_.c_str(), aside.c_str()) == 0) {
            if (read_lock(aside) == held) ::unlink(aside.c_str());
            else ::rename(aside.c_str(), path_.c_str());
        }
        if (create_lock(path_, token_)) return;
    }
    const std::string holder = read_lock(path_);
    throw Error(target + ": another merge into this target is running (lock " + path_ + " held by host and pid " +
                (holder.empty() ? std::string("unknown") : holder.substr(0, holder.find_last_of(' '))) +
                "); wait for it, or remove the lock file if no merge is running on that host");
}

TargetLock::~TargetLock() {
    g_lock_path[0] = '\0';
    if (read_lock(path_) == token_) ::unlink(path_.c_str());
}

}  // namespace vmerge
