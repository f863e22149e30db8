#include "io/read_once.h"

#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "core/error.h"

namespace vmerge {
namespace {

struct ReadLog {
    std::mutex mutex;
    bool recording = false;
    std::vector<SmallFile> recorded;
    std::optional<std::map<std::string, SmallFile>> replay;
};

ReadLog& read_log() {
    static ReadLog log;
    return log;
}

}  // namespace

std::string read_once(const std::string& path, const std::function<std::string()>& read) {
    ReadLog& log = read_log();
    {
        std::lock_guard lock(log.mutex);
        if (log.replay)
            if (auto it = log.replay->find(path); it != log.replay->end()) return it->second.contents();
        if (!log.recording) return read();
    }
    SmallFile file;
    file.path = path;
    file.exists = true;
    try {
        file.text = read();
    } catch (const std::exception& e) {
        file.error = *e.what() ? e.what() : path + ": cannot read it";
        std::lock_guard lock(log.mutex);
        log.recorded.push_back(file);
        throw;
    }
    std::lock_guard lock(log.mutex);
    log.recorded.push_back(file);
    return file.text;
}

void start_recording_reads() {
    ReadLog& log = read_log();
    std::lock_guard lock(log.mutex);
    log.recording = true;
    log.recorded.clear();
}

std::vector<SmallFile> stop_recording_reads() {
    ReadLog& log = read_log();
    std::lock_guard lock(log.mutex);
    log.recording = false;
    return std::exchange(log.recorded, {});
}

ReplayedReads::ReplayedReads(std::vector<SmallFile> files) {
    std::map<std::string, SmallFile> by_path;
    for (auto& f : files) by_path.insert_or_assign(f.path, std::move(f));
    ReadLog& log = read_log();
    std::lock_guard lock(log.mutex);
    log.replay = std::move(by_path);
}

ReplayedReads::~ReplayedReads() {
    ReadLog& log = read_log();
    std::lock_guard lock(log.mutex);
    log.replay.reset();
}

}  // namespace vmerge
