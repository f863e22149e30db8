#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/output_layout.h"

namespace vmerge {

// `merge --reuse PREVIOUS`: an earlier merged folder (the last step's, when watch passes it)
// whose files this merge takes over where they are unchanged.
//
// Every block the executor produces is compared, byte for byte, with the previous file of the
// same name at the same offset, when that file has the same size and the same header (so the
// same tensors at the same offsets). A block that equals it is not written. After the copy,
// the ranks pool which files any of them found changed (reuse_state, complete): in a changed
// file, each rank copies the blocks it skipped from the previous file (the same bytes); a file
// no rank found changed is hard-linked from the previous folder at commit (copied where a link
// cannot be made: another filesystem).
//
// Why bytes and not a recorded hash of the sources: equal sources do not make equal outputs
// when the recipe changed (dtype, names, quantization, a vmerge fix), and a recorded hash cannot
// see a previous file modified since it was written; comparing the outputs sees both.
// Rank 0, before the staging folder is made: Error unless `dir` is a folder vmerge wrote (its
// manifest lists every entry) and not the target itself.
void check_reusable(const std::string& dir, const std::string& target);

class PreviousOutput {
public:
    PreviousOutput(const std::string& dir, const std::string& staging, const OutputLayout& layout);
    ~PreviousOutput();
    PreviousOutput(const PreviousOutput&) = delete;
    PreviousOutput& operator=(const PreviousOutput&) = delete;

    // Executor's writer thread: true when `size` bytes at `offset` of layout file `file` equal
    // the previous file's (then they are not written now); false when they must be written.
    bool same_as_previous(size_t file, uint64_t offset, const unsigned char* data, size_t size);

    // This rank's findings for the others: which files it wrote a block of, and its byte counts.
    std::string reuse_state() const;
    // With every rank's reuse_state: copies this rank's skipped blocks of changed files from the
    // previous folder (durably). Returns what was reused, for rank 0 to print.
    std::vector<std::string> complete(const std::vector<std::string>& states);
    // Rank 0, before the commit checks the staging folder: the unchanged files linked in.
    void link_unchanged();

private:
    struct File {
        bool opened = false;   // the previous file was looked at (on this rank's first block of it)
        int fd = -1;           // the previous file, open while it is a candidate
        bool changed = false;  // no candidate, or this rank wrote one of its blocks
        bool wrote = false;    // this rank wrote one of its blocks
        std::vector<std::pair<uint64_t, uint64_t>> skipped;  // offset, length
        uint64_t skipped_bytes = 0;
        // What the previous file was when this rank opened it ("mtime_ns:inode"; "" unopened);
        // after complete, what every rank that compared it saw: the link takes that file only.
        std::string identity;
    };
    void copy_skipped(size_t file);
    std::string dir_, staging_;
    const OutputLayout& layout_;
    std::vector<File> files_;
    std::vector<bool> unchanged_;  // after complete: no rank wrote a block of it
    uint64_t written_bytes_ = 0;
    std::vector<unsigned char> previous_bytes_;
};

}  // namespace vmerge
