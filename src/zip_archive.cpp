#include "vmerge/zip_archive.h"

#include <algorithm>

#include "vmerge/error.h"

namespace vmerge {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndOfCentralDirSignature = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDirSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;

constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndOfCentralDirSize = 22;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EndOfCentralDirSize = 56;
constexpr uint64_t kMaxCommentSize = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kZip64Marker = 0xFFFFFFFF;
constexpr uint16_t kMethodStored = 0;

// A central directory this large would describe millions of records; refusing it keeps a
// lying size field in a huge file from turning into a huge allocation.
constexpr uint64_t kMaxCentralDirSize = uint64_t{1} << 30;
constexpr uint64_t kMaxReadSize = uint64_t{1} << 30;

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

uint32_t le32(const unsigned char* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t le64(const unsigned char* p) {
    return static_cast<uint64_t>(le32(p)) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// Reads the archive of one file; every offset it is given is relative to the archive start.
class ArchiveReader {
public:
    ArchiveReader(const InputFile& file, uint64_t base, uint64_t length)
        : file_(file), base_(base), length_(length) {}

    [[noreturn]] void fail(uint64_t offset, const std::string& what) const {
        std::string where = file_.path() + ": ZIP archive";
        if (base_ != 0) where += " at offset " + std::to_string(base_);
        throw Error(where + ", byte " + std::to_string(offset) + " of " + std::to_string(length_) +
                    ": " + what);
    }

    bool contains(uint64_t offset, uint64_t size) const {
        return offset <= length_ && size <= length_ - offset;
    }

    std::string read(uint64_t offset, uint64_t size, const std::string& what) const {
        if (!contains(offset, size)) {
            fail(offset, what + " (" + std::to_string(size) + " bytes) ends past the archive end");
        }
        std::string bytes(size, '\0');
        file_.read_exact(base_ + offset, bytes.data(), size, what.c_str());
        return bytes;
    }

    uint64_t length() const { return length_; }

private:
    const InputFile& file_;
    uint64_t base_;
    uint64_t length_;
};

const unsigned char* bytes_of(const std::string& s) {
    return reinterpret_cast<const unsigned char*>(s.data());
}

struct CentralDirLocation {
    uint64_t offset;
    uint64_t size;
    uint64_t entries;
    uint64_t end_limit;  // the central directory must end here (where the EOCD records start)
};

CentralDirLocation locate_central_dir(const ArchiveReader& archive) {
    if (archive.length() < kEndOfCentralDirSize) {
        archive.fail(0, "too short for a ZIP end-of-central-directory record");
    }
    const uint64_t tail_size = std::min(archive.length(), kEndOfCentralDirSize + kMaxCommentSize);
    const uint64_t tail_start = archive.length() - tail_size;
    const std::string tail = archive.read(tail_start, tail_size, "ZIP archive tail");
    const unsigned char* t = bytes_of(tail);

    // Scan back: the last signature whose comment fits in the tail is the real record.
    uint64_t eocd = tail_size;
    for (uint64_t pos = tail_size - kEndOfCentralDirSize + 1; pos-- > 0;) {
        if (le32(t + pos) == kEndOfCentralDirSignature &&
            pos + kEndOfCentralDirSize + le16(t + pos + 20) <= tail_size) {
            eocd = pos;
            break;
        }
    }
    if (eocd == tail_size) {
        archive.fail(tail_start, "no end-of-central-directory record in the last " +
                                     std::to_string(tail_size) + " bytes (a truncated file, or not a ZIP file)");
    }
    const uint64_t eocd_offset = tail_start + eocd;
    const unsigned char* e = t + eocd;
    CentralDirLocation location{le32(e + 16), le32(e + 12), le16(e + 10), eocd_offset};

    // torch always writes a ZIP64 locator right before the classic record; when present its
    // values replace the clamped 16/32-bit ones.
    if (eocd_offset >= kZip64LocatorSize) {
        const std::string locator =
            archive.read(eocd_offset - kZip64LocatorSize, kZip64LocatorSize, "ZIP64 locator");
        if (le32(bytes_of(locator)) == kZip64LocatorSignature) {
            const uint64_t zip64_offset = le64(bytes_of(locator) + 8);
            const uint64_t zip64_limit = eocd_offset - kZip64LocatorSize;
            if (zip64_offset > zip64_limit ||
                kZip64EndOfCentralDirSize > zip64_limit - zip64_offset) {
                archive.fail(eocd_offset - kZip64LocatorSize,
                             "ZIP64 locator points to offset " + std::to_string(zip64_offset) +
                                 ", outside the archive before the locator");
            }
            const std::string record = archive.read(zip64_offset, kZip64EndOfCentralDirSize,
                                                    "ZIP64 end-of-central-directory record");
            const unsigned char* z = bytes_of(record);
            if (le32(z) != kZip64EndOfCentralDirSignature) {
                archive.fail(zip64_offset,
                             "no ZIP64 end-of-central-directory signature where "
                             "the ZIP64 locator points");
            }
            location = {le64(z + 48), le64(z + 40), le64(z + 32), zip64_offset};
        }
    }

    if (location.offset > location.end_limit ||
        location.size > location.end_limit - location.offset) {
        archive.fail(location.end_limit,
                     "central directory (offset " + std::to_string(location.offset) + ", " +
                         std::to_string(location.size) +
                         " bytes) does not end before the end-of-central-directory records");
    }
    if (location.size > kMaxCentralDirSize) {
        archive.fail(location.offset, "central directory of " + std::to_string(location.size) +
                                          " bytes is larger than the supported 1 GiB");
    }
    if (location.entries > location.size / kCentralHeaderSize) {
        archive.fail(location.offset,
                     std::to_string(location.entries) + " entries cannot fit in a " +
                         std::to_string(location.size) + "-byte central directory");
    }
    return location;
}

// Replaces the 32-bit fields marked 0xFFFFFFFF by the u64 values of the ZIP64 extra block.
void apply_zip64_extra(const ArchiveReader& archive, uint64_t entry_offset, const std::string& name,
                       const unsigned char* extra, uint64_t extra_size, uint64_t& uncompressed,
                       uint64_t& compressed, uint64_t& local_offset) {
    uint64_t* fields[] = {&uncompressed, &compressed, &local_offset};
    uint64_t pos = 0;
    while (pos + 4 <= extra_size) {
        const uint16_t id = le16(extra + pos);
        const uint16_t block_size = le16(extra + pos + 2);
        if (block_size > extra_size - pos - 4) {
            archive.fail(entry_offset, "extra field of record '" + name + "' is truncated");
        }
        if (id == kZip64ExtraId) {
            const unsigned char* value = extra + pos + 4;
            uint64_t left = block_size;
            for (uint64_t* field : fields) {
                if (*field != kZip64Marker) continue;
                if (left < 8) {
                    archive.fail(entry_offset, "ZIP64 extra field of record '" + name +
                                                   "' lacks a 64-bit size or offset");
                }
                *field = le64(value);
                value += 8;
                left -= 8;
            }
            return;
        }
        pos += 4 + block_size;
    }
}

}  // namespace

ZipArchive ZipArchive::open(const InputFile& file, uint64_t base, uint64_t length) {
    if (base > file.size()) {
        throw Error(file.path() + ": ZIP archive offset " + std::to_string(base) +
                    " is past the end of the file (size " + std::to_string(file.size()) + ")");
    }
    if (length == 0) length = file.size() - base;
    if (length > file.size() - base) {
        throw Error(file.path() + ": ZIP archive at offset " + std::to_string(base) + " of " +
                    std::to_string(length) + " bytes ends past the end of the file (size " +
                    std::to_string(file.size()) + ")");
    }
    const ArchiveReader archive(file, base, length);
    const CentralDirLocation location = locate_central_dir(archive);
    const std::string directory =
        archive.read(location.offset, location.size, "ZIP central directory");
    const unsigned char* cd = bytes_of(directory);

    ZipArchive result;
    result.path_ = file.path();
    result.records_.reserve(location.entries);
    uint64_t pos = 0;
    for (uint64_t index = 0; index < location.entries; ++index) {
        const uint64_t entry_offset = location.offset + pos;
        if (kCentralHeaderSize > location.size - pos) {
            archive.fail(entry_offset, "central directory entry #" + std::to_string(index) +
                                           " runs past the end of the central directory");
        }
        const unsigned char* entry = cd + pos;
        if (le32(entry) != kCentralHeaderSignature) {
            archive.fail(entry_offset,
                         "no central directory signature for entry #" + std::to_string(index));
        }
        const uint16_t method = le16(entry + 10);
        uint64_t compressed = le32(entry + 20);
        uint64_t uncompressed = le32(entry + 24);
        const uint64_t name_size = le16(entry + 28);
        const uint64_t extra_size = le16(entry + 30);
        const uint64_t comment_size = le16(entry + 32);
        uint64_t local_offset = le32(entry + 42);
        if (name_size + extra_size + comment_size > location.size - pos - kCentralHeaderSize) {
            archive.fail(entry_offset, "name, extra field and comment of entry #" +
                                           std::to_string(index) +
                                           " run past the end of the central directory");
        }
        std::string name(reinterpret_cast<const char*>(entry + kCentralHeaderSize), name_size);
        apply_zip64_extra(archive, entry_offset, name, entry + kCentralHeaderSize + name_size,
                          extra_size, uncompressed, compressed, local_offset);
        pos += kCentralHeaderSize + name_size + extra_size + comment_size;

        if (method != kMethodStored) {
            archive.fail(entry_offset, "record '" + name + "' is compressed (method " +
                                           std::to_string(method) +
                                           "); only stored records, as torch.save writes "
                                           "them, are supported");
        }
        if (compressed != uncompressed) {
            archive.fail(entry_offset, "stored record '" + name + "' has compressed size " +
                                           std::to_string(compressed) + " != uncompressed size " +
                                           std::to_string(uncompressed));
        }
        // The local extra field differs from the central one (torch pads it for alignment),
        // so the data offset needs the local header itself.
        const std::string local =
            archive.read(local_offset, kLocalHeaderSize, "local header of record '" + name + "'");
        if (le32(bytes_of(local)) != kLocalHeaderSignature) {
            archive.fail(local_offset, "no local header signature for record '" + name + "'");
        }
        const uint64_t data_offset = local_offset + kLocalHeaderSize + le16(bytes_of(local) + 26) +
                                     le16(bytes_of(local) + 28);
        if (!archive.contains(data_offset, uncompressed)) {
            archive.fail(local_offset, "data of record '" + name + "' (" +
                                           std::to_string(uncompressed) + " bytes at offset " +
                                           std::to_string(data_offset) +
                                           ") ends past the archive end");
        }

        if (index == 0) {
            const size_t slash = name.find('/');
            if (slash == std::string::npos) {
                archive.fail(entry_offset,
                             "first record '" + name + "' has no '/' so the archive has no prefix");
            }
            result.prefix_ = name.substr(0, slash);
        }
        if (!result.by_name_.emplace(name, result.records_.size()).second) {
            archive.fail(entry_offset, "record '" + name + "' appears twice");
        }
        result.records_.push_back(ZipRecord{std::move(name), base + data_offset, uncompressed});
    }
    return result;
}

const ZipRecord* ZipArchive::find(const std::string& name_without_prefix) const {
    const auto it = by_name_.find(prefix_ + "/" + name_without_prefix);
    return it == by_name_.end() ? nullptr : &records_[it->second];
}

const ZipRecord& ZipArchive::get(const std::string& name_without_prefix) const {
    const ZipRecord* record = find(name_without_prefix);
    if (record == nullptr) {
        throw Error(path_ + ": archive '" + prefix_ + "' has no record '" + name_without_prefix +
                    "'");
    }
    return *record;
}

std::string ZipArchive::read(const InputFile& file, const ZipRecord& record) const {
    if (record.size > kMaxReadSize) {
        throw Error(file.path() + ": record '" + record.name + "' of " +
                    std::to_string(record.size) +
                    " bytes is too large to read whole (limit 1 GiB)");
    }
    std::string bytes(record.size, '\0');
    const std::string what = "record '" + record.name + "'";
    file.read_exact(record.data_offset, bytes.data(), record.size, what.c_str());
    return bytes;
}

}  // namespace vmerge
