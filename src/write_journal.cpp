#include "vmerge/write_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "vmerge/bounded_number.h"
#include "vmerge/checksum.h"
#include "vmerge/error.h"
#include "vmerge/json_file.h"
#include "vmerge/input_file.h"

namespace vmerge {
namespace fs = std::filesystem;

std::string journal_dir(const std::string& staging) { return staging + "/.vmerge-journal"; }

ResumeIdentity resume_identity(const OutputLayout& layout, int ranks, uint64_t max_memory, const std::string& values) {
    std::string all = values;
    for (const auto& f : layout.files) all += f.name + "\n" + std::to_string(f.size) + "\n" + f.header;
    return {hex64(xxh64(all.data(), all.size())), ranks, max_memory};
}

void write_resume_identity(const std::string& staging, const ResumeIdentity& id) {
    fs::create_directories(journal_dir(staging));
    std::ofstream(journal_dir(staging) + "/plan")
        << nlohmann::json{{"plan", id.plan}, {"ranks", id.ranks}, {"max_memory", id.max_memory}}.dump() << "\n";
}

void check_resume_identity(const std::string& staging, const ResumeIdentity& id) {
    const std::string path = journal_dir(staging) + "/plan";
    nlohmann::json recorded;
    try {
        recorded = nlohmann::json::parse(read_small_file(path, kMaxJsonBytes, "a staging plan"));
    } catch (const nlohmann::json::exception&) {
        throw Error(path + ": unreadable; this staging folder cannot be resumed (delete it, or rerun without --resume)");
    }
    if (recorded.value("plan", "") != id.plan)
        throw Error(staging + ": this staging folder was written for a different merge (other checkpoint, flags or "
                              "shard size); delete it, or rerun without --resume to start over");
    const int ranks = recorded.value("ranks", 0);
    const uint64_t memory = recorded.value("max_memory", uint64_t{0});
    if (ranks != id.ranks || memory != id.max_memory)
        throw Error(staging + ": the interrupted merge ran with " + std::to_string(ranks) + " ranks and --max-memory " +
                    std::to_string(memory) + " bytes; resume with the same (mpirun -np " + std::to_string(ranks) +
                    " ... --max-memory " + std::to_string(memory) + "B --resume), or rerun without --resume");
}

JournalWriter::JournalWriter(const std::string& staging, int rank)
    : path_(journal_dir(staging) + "/rank-" + std::to_string(rank)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path_ + ": cannot open the write journal: " + std::strerror(errno));
}

JournalWriter::~JournalWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::append(const WrittenBlock& b) {
    std::ostringstream line;
    line << b.tensor << ' ' << b.row_begin << ' ' << b.row_end << ' ' << b.file << ' ' << b.offset << ' ' << b.length
         << ' ' << hex64(b.hash) << '\n';
    const std::string text = line.str();
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
            std::istringstream fields(line);
            WrittenBlock b;
            std::string hash;
            if (!(fields >> b.tensor >> b.row_begin >> b.row_end >> b.file >> b.offset >> b.length >> hash))
                continue;  // a line torn by a killed rank: that block is simply redone
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
        std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
        // The same block may be journaled twice (a resumed run rewrote it): keep one.
        list.erase(std::unique(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.offset == b.offset; }),
                   list.end());
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

std::vector<std::string> verify_checksums(const std::string& dir) {
    const std::string path = dir + "/" + kChecksumsFile;
    const nlohmann::json j = read_json_file(path);
    if (j.value("algorithm", "") != "xxh64" || !j.contains("files") || !j["files"].is_object())
        throw Error(path + ": expected {\"algorithm\": \"xxh64\", \"files\": {...}}");
    std::vector<std::string> problems;
    std::vector<unsigned char> buffer;
    for (auto it = j["files"].begin(); it != j["files"].end(); ++it) {
        const std::string file_path = dir + "/" + it.key();
        if (!fs::exists(file_path)) {
            problems.push_back(file_path + ": missing");
            continue;
        }
        InputFile file(file_path);
        if (file.size() != it->at("size").get<uint64_t>()) {
            problems.push_back(file_path + ": " + std::to_string(file.size()) + " bytes, recorded " +
                               it->at("size").dump());
            continue;
        }
        std::vector<nlohmann::json> ranges{it->at("header")};
        for (const auto& r : it->at("blocks")) ranges.push_back(r);
        for (const auto& r : ranges) {
            const uint64_t offset = r.at(0).get<uint64_t>(), length = r.at(1).get<uint64_t>();
            const auto want = parse_hex64(r.at(2).get<std::string>());
            if (!want || offset > file.size() || length > file.size() - offset) {
                problems.push_back(path + ": range " + r.dump() + " of " + it.key() + " is not inside its " +
                                   std::to_string(file.size()) + " bytes with a 16-digit hex checksum");
                continue;
            }
            // Ranges are the blocks ranks wrote, each bounded by their --max-memory.
            buffer.resize(length);
            file.read_exact(offset, buffer.data(), length, "checksummed range");
            if (xxh64(buffer.data(), length) != *want) {
                problems.push_back(file_path + ": bytes " + std::to_string(offset) + ".." + std::to_string(offset + length) +
                                   " do not match their recorded checksum");
            }
        }
    }
    return problems;
}

}  // namespace vmerge
