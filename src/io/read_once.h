#pragma once
#include <functional>
#include <string>
#include <vector>

#include "io/small_file.h"

namespace vmerge {

// Files read once for every rank. Detection opens a handful of small files (fsdp_config.json,
// a tracker, manifests, a DCP .metadata) that every rank needs; on a parallel file system a
// thousand ranks opening them at once is a metadata storm. Rank 0 detects while recording what
// it reads, the recording is broadcast, and the other ranks detect from it: their reads of
// those paths are answered from memory, with the text or the very error rank 0 saw.
//
// `read` is the real read of `path`; while recording, its result (or its Error) is kept; while
// replaying, a recorded path is answered without calling it (an unrecorded one is read).
std::string read_once(const std::string& path, const std::function<std::string()>& read);

// Starts recording (this thread's process; detection is single-threaded). Reads recorded
// earlier are discarded.
void start_recording_reads();
// Stops recording and returns what was read, in order.
std::vector<SmallFile> stop_recording_reads();

// Until the returned guard goes, read_once answers the paths in `files` from them.
class ReplayedReads {
public:
    explicit ReplayedReads(std::vector<SmallFile> files);
    ~ReplayedReads();
    ReplayedReads(const ReplayedReads&) = delete;
    ReplayedReads& operator=(const ReplayedReads&) = delete;
};

}  // namespace vmerge
