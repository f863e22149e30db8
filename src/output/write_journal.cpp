#include "output/write_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/bounded_number.h"
#include "io/checksum.h"
#include "io/contained_path.h"
#include "core/error.h"
#include "io/input_file.h"
#include "io/object_url.h"
#include "core/human_units.h"
#include "io/json_file.h"
#include "io/input_file.h"
#include "output/output_folder.h"

namespace vmerge {
namespace fs = std::filesystem;

std::string journal_dir(const std::string& staging) { return staging + "/.vmerge-journal"; }

ResumeIdentity resume_identity(const OutputLayout& layout, int ranks, uint64_t max_memory, const std::string& values) {
    std::string all = values;
    for (const auto& f : layout.files) all += f.name + "\n" + std::to_string(f.size) + "\n" + f.header;
    ResumeIdentity identity;
    identity.plan = hex64(xxh64(all.data(), all.size()));
    identity.ranks = ranks;
    identity.max_memory = max_memory;
    return identity;  // inputs and scans are filled by the caller, which knows the files
}

std::vector<InputStamp> stamp_inputs(std::vector<std::string> paths) {
    std::sort(paths.begin(), paths.end());
    paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
    std::vector<InputStamp> out;
    for (const auto& p : paths) {
        if (is_object_url(p)) {  // no modification time in the listing vmerge keeps: the size stamps it
            out.push_back({p, InputFile(p).size(), 0});
            continue;
        }
        struct stat info {};
        if (::stat(p.c_str(), &info) != 0) throw Error(p + ": cannot stat: " + std::strerror(errno));
        out.push_back({p, static_cast<uint64_t>(info.st_size),
                       static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec});
    }
    return out;
}

namespace {

nlohmann::json stamps_json(const std::vector<InputStamp>& stamps) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : stamps) out.push_back({s.path, s.size, s.mtime_ns});
    return out;
}

// The first input that differs between the interrupted merge and this one, for the message.
std::string changed_input(const nlohmann::json& recorded, const std::vector<InputStamp>& now) {
    std::map<std::string, std::pair<uint64_t, int64_t>> before;
    if (recorded.is_array())
        for (const auto& r : recorded)
            if (r.is_array() && r.size() == 3 && r[0].is_string() && r[1].is_number_unsigned() && r[2].is_number_integer())
                before[r[0].get<std::string>()] = {r[1].get<uint64_t>(), r[2].get<int64_t>()};
    for (const auto& s : now) {
        auto it = before.find(s.path);
        if (it == before.end()) return s.path + " was not an input of the interrupted merge";
        if (it->second.first != s.size)
            return s.path + " is " + std::to_string(s.size) + " bytes, was " + std::to_string(it->second.first);
        if (it->second.second != s.mtime_ns) return s.path + " was modified after the interrupted merge read it";
        before.erase(it);
    }
    if (!before.empty()) return before.begin()->first + " was an input of the interrupted merge and is not one now";
    return "";
}

}  // namespace

void write_resume_identity(const std::string& staging, const ResumeIdentity& id) {
    fs::create_directories(journal_dir(staging));
    const nlohmann::json j{{"plan", id.plan}, {"ranks", id.ranks}, {"max_memory", id.max_memory},
                           {"inputs", stamps_json(id.inputs)}, {"scans", id.scans}};
    write_durable(journal_dir(staging) + "/plan", j.dump() + "\n", " the resume plan");
}

void check_resume_identity(const std::string& staging, const ResumeIdentity& id) {
    const std::string path = journal_dir(staging) + "/plan";
    nlohmann::json recorded;
    try {
        recorded = nlohmann::json::parse(read_small_file(path, kMaxJsonBytes, "a staging plan"));
    } catch (const nlohmann::json::exception&) {
        throw Error(path + ": unreadable; this staging folder cannot be resumed (delete it, or rerun without --resume)");
    }
    if (!recorded.is_object())
        throw Error(path + ": not a resume plan; this staging folder cannot be resumed (rerun without --resume)");
    const std::string changed = changed_input(recorded.value("inputs", nlohmann::json()), id.inputs);
    if (!changed.empty())
        throw Error(staging + ": the checkpoint changed since the interrupted merge (" + changed +
                    "): its output cannot be continued; rerun without --resume to start over");
    if (recorded.value("scans", "") != id.scans)
        throw Error(staging + ": the checkpoint's tensors differ from those the interrupted merge read; rerun "
                              "without --resume to start over");
    if (recorded.value("plan", "") != id.plan)
        throw Error(staging + ": this staging folder was written for a different merge (other checkpoint, flags or "
                              "shard size); rerun without --resume to start over");
    const int ranks = recorded.value("ranks", 0);
    const uint64_t memory = recorded.value("max_memory", uint64_t{0});
    if (ranks != id.ranks || memory != id.max_memory)
        throw Error(staging + ": the interrupted merge ran with " + std::to_string(ranks) + " ranks and --max-memory " +
                    exact_size_flag(memory) + "; resume with the same (mpirun -np " + std::to_string(ranks) +
                    " ... --max-memory " + exact_size_flag(memory) + " --resume), or rerun without --resume");
}

JournalWriter::JournalWriter(const std::string& staging, int rank)
    : path_(journal_dir(staging) + "/rank-" + std::to_string(rank)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path_ + ": cannot open the write journal: " + std::strerror(errno));
}

JournalWriter::~JournalWriter() {
    if (fd_ >= 0) ::close(fd_);
}

namespace {

// A journal line: the block's fields, then the xxh64 of that text.
std::string block_fields(const WrittenBlock& b) {
    std::ostringstream line;
    line << b.tensor << ' ' << b.row_begin << ' ' << b.row_end << ' ' << b.file << ' ' << b.offset << ' ' << b.length
         << ' ' << hex64(b.hash);
    return line.str();
}

std::string line_check(const std::string& fields) { return hex64(xxh64(fields.data(), fields.size(), 0x766d65726765ull)); }

}  // namespace

void JournalWriter::append(const WrittenBlock& b) {
    const std::string fields = block_fields(b);
    const std::string text = fields + ' ' + line_check(fields) + '\n';
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw Error(path_ + ": cannot append to the write journal: " + std::strerror(errno));
}

std::vector<WrittenBlock> read_journals(const std::string& staging) {
    std::vector<WrittenBlock> blocks;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(journal_dir(staging), ec)) {
        if (!entry.path().filename().string().starts_with("rank-")) continue;
        // Through InputFile: a FIFO planted in the staging folder is refused, not waited on.
        std::istringstream in(read_small_file(entry.path().string(), kMaxJournalBytes, "a write journal"));
        std::string line;
        while (std::getline(in, line)) {
            // A line torn by a killed rank, or changed since: that block is simply redone.
            const size_t split = line.find_last_of(' ');
            if (split == std::string::npos || line.substr(split + 1) != line_check(line.substr(0, split))) continue;
            std::istringstream fields(line.substr(0, split));
            WrittenBlock b;
            std::string hash;
            if (!(fields >> b.tensor >> b.row_begin >> b.row_end >> b.file >> b.offset >> b.length >> hash))
                continue;
            const auto parsed_hash = parse_hex64(hash);
            if (!parsed_hash) continue;
            b.hash = *parsed_hash;
            blocks.push_back(b);
        }
    }
    return blocks;
}

std::map<BlockKey, WrittenBlock> blocks_by_key(const std::vector<WrittenBlock>& blocks) {
    std::map<BlockKey, WrittenBlock> out;
    for (const auto& b : blocks) out[{b.tensor, b.row_begin, b.row_end}] = b;
    return out;
}

std::string checksums_json(const OutputLayout& layout, const std::vector<WrittenBlock>& blocks) {
    nlohmann::ordered_json files = nlohmann::ordered_json::object();
    std::vector<std::vector<WrittenBlock>> per_file(layout.files.size());
    for (const auto& b : blocks) per_file.at(b.file).push_back(b);
    for (size_t f = 0; f < layout.files.size(); ++f) {
        auto& list = per_file[f];
        // The same block may be journaled twice (a resumed run rewrote it): the later line wins.
        std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
        std::vector<WrittenBlock> latest;
        for (const auto& b : list) {
            if (!latest.empty() && latest.back().offset == b.offset) latest.back() = b;
            else latest.push_back(b);
        }
        list.swap(latest);
        const OutputFile& file = layout.files[f];
        uint64_t at = file.header.size();
        nlohmann::ordered_json ranges = nlohmann::ordered_json::array();
        for (const auto& b : list) {
            if (b.offset != at)
                throw Error("internal: the write journal of " + file.name + " has a gap or overlap at byte " +
                            std::to_string(at));
            ranges.push_back({b.offset, b.length, hex64(b.hash)});
            at += b.length;
        }
        if (at != file.size)
            throw Error("internal: the write journal of " + file.name + " stops at byte " + std::to_string(at) + " of " +
                        std::to_string(file.size));
        files[file.name] = {{"size", file.size},
                            {"header", {0, file.header.size(), hex64(xxh64(file.header.data(), file.header.size()))}},
                            {"blocks", ranges}};
    }
    nlohmann::ordered_json j = {{"algorithm", "xxh64"}, {"files", files}};
    return j.dump() + "\n";
}

namespace {

// The XXH64 of bytes [offset, offset + length) of a file, read in bounded pieces (a recorded
// range is as long as the file allows, whatever a crafted list says).
uint64_t range_checksum(const InputFile& file, uint64_t offset, uint64_t length) {
    constexpr uint64_t kPiece = 8ull << 20;
    std::vector<unsigned char> buffer(static_cast<size_t>(std::min(length, kPiece)));
    Xxh64Stream hash;
    for (uint64_t done = 0; done < length;) {
        const uint64_t n = std::min(kPiece, length - done);
        file.read_exact(offset + done, buffer.data(), n, "checksummed range");
        hash.update(buffer.data(), n);
        done += n;
    }
    return hash.digest();
}

// The problems of one file of the checksum list (its entry malformed, its bytes changed).
void verify_file_checksums(const std::string& dir, const std::string& list, const std::string& name,
                           const nlohmann::json& entry, std::vector<std::string>& problems) {
    const std::string file_path = path_inside(dir, name, list);
    if (!fs::exists(file_path)) {
        problems.push_back(file_path + ": missing");
        return;
    }
    if (!entry.is_object() || !entry.contains("size") || !entry["size"].is_number_unsigned() ||
        !entry.contains("header") || !entry.contains("blocks") || !entry["blocks"].is_array())
        throw Error(list + ": the entry of " + name + " is not {\"size\": N, \"header\": [...], \"blocks\": [...]}");
    InputFile file(file_path);
    if (file.size() != entry["size"].get<uint64_t>()) {
        problems.push_back(file_path + ": " + std::to_string(file.size()) + " bytes, recorded " + entry["size"].dump());
        return;
    }
    std::vector<nlohmann::json> ranges{entry["header"]};
    for (const auto& r : entry["blocks"]) ranges.push_back(r);
    for (const auto& r : ranges) {
        const bool well_formed = r.is_array() && r.size() == 3 && r[0].is_number_unsigned() &&
                                 r[1].is_number_unsigned() && r[2].is_string();
        const uint64_t offset = well_formed ? r[0].get<uint64_t>() : 0, length = well_formed ? r[1].get<uint64_t>() : 0;
        const auto want = well_formed ? parse_hex64(r[2].get<std::string>()) : std::nullopt;
        if (!want || offset > file.size() || length > file.size() - offset) {
            problems.push_back(list + ": range " + r.dump().substr(0, 200) + " of " + name + " is not inside its " +
                               std::to_string(file.size()) + " bytes with a 16-digit hex checksum");
            continue;
        }
        if (range_checksum(file, offset, length) != *want)
            problems.push_back(file_path + ": bytes " + std::to_string(offset) + ".." + std::to_string(offset + length) +
                               " do not match their recorded checksum");
    }
}

}  // namespace

std::vector<std::string> verify_checksums(const std::string& dir) {
    const std::string path = dir + "/" + kChecksumsFile;
    const nlohmann::json j = read_json_file(path);
    if (!j.is_object() || !j.contains("algorithm") || j["algorithm"] != "xxh64" || !j.contains("files") || !j["files"].is_object())
        throw Error(path + ": expected {\"algorithm\": \"xxh64\", \"files\": {...}}");
    std::vector<std::string> problems;
    for (auto it = j["files"].begin(); it != j["files"].end(); ++it)
        verify_file_checksums(dir, path, it.key(), it.value(), problems);
    return problems;
}

std::string file_checksums_json(const std::string& dir, const std::vector<std::string>& names, uint64_t block_bytes) {
    OutputLayout layout;
    std::vector<WrittenBlock> blocks;
    for (const std::string& name : names) {
        const InputFile file(dir + "/" + name);
        OutputFile entry;
        entry.name = name;
        entry.size = file.size();
        for (uint64_t offset = 0; offset < file.size(); offset += block_bytes) {
            WrittenBlock b;
            b.file = layout.files.size();
            b.offset = offset;
            b.length = std::min(block_bytes, file.size() - offset);
            b.hash = range_checksum(file, offset, b.length);
            blocks.push_back(b);
        }
        layout.files.push_back(std::move(entry));
    }
    return checksums_json(layout, blocks);
}

}  // namespace vmerge
