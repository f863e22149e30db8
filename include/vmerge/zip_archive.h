#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vmerge/input_file.h"

namespace vmerge {

struct ZipRecord {
    std::string name;        // full name as in the central directory, e.g. "model/data/0"
    uint64_t data_offset;    // absolute offset of the record's bytes in the file
    uint64_t size;           // uncompressed (= stored) size
};

// The ZIP container torch.save writes (torch-formats.md §1): central directory, ZIP64,
// stored records only. It may start at `base` inside a larger file (a DCP item) and
// span `length` bytes; offsets in the archive are relative to `base`.
class ZipArchive {
public:
    // Parses the central directory of the archive in [base, base+length) of `file`
    // (length 0 = to the end of the file). Throws Error naming the file and offset.
    static ZipArchive open(const InputFile& file, uint64_t base = 0, uint64_t length = 0);

    // The archive prefix: entry #0's name up to its first '/'.
    const std::string& prefix() const { return prefix_; }
    const std::vector<ZipRecord>& records() const { return records_; }
    // Looks a record up by its name without the prefix ("data.pkl", "data/0");
    // nullptr when absent.
    const ZipRecord* find(const std::string& name_without_prefix) const;
    // Same, but a missing record is an Error naming the file.
    const ZipRecord& get(const std::string& name_without_prefix) const;
    // Reads a whole record (for data.pkl and small records).
    std::string read(const InputFile& file, const ZipRecord& record) const;

private:
    std::string path_;
    std::string prefix_;
    std::vector<ZipRecord> records_;
    std::map<std::string, size_t> by_name_;
};

}  // namespace vmerge
