#include "output/s3/rank_parts.h"

#include <cstring>

#include "core/error.h"

namespace vmerge {
namespace {

struct PieceHeader {
    uint64_t file = 0;
    uint64_t number = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
};

const ShareSpan* piece_of(const PlannedPart& part, int rank) {
    for (const ShareSpan& span : part.pieces)
        if (span.rank == rank) return &span;
    return nullptr;
}

std::string part_name(const OutputLayout& layout, const PlannedPart& part) {
    return layout.files.at(part.file).name + " part " + std::to_string(part.number);
}

}  // namespace

RankParts::RankParts(const UploadPlan& plan, const OutputLayout& layout, int rank, Ready ready)
    : plan_(plan), layout_(layout), rank_(rank), ready_(std::move(ready)) {}

RankParts::Assembly& RankParts::owned(const PlannedPart& part) {
    auto [it, fresh] = owned_.try_emplace({part.file, part.number});
    Assembly& a = it->second;
    if (fresh) {
        a.bytes.resize(part.length);
        a.missing = part.length;
        // The header is the same on every rank: the owner puts it in without waiting for anyone.
        const std::string& header = layout_.files[part.file].header;
        if (part.offset < header.size()) {
            const uint64_t n = std::min<uint64_t>(header.size() - part.offset, part.length);
            std::memcpy(a.bytes.data(), header.data() + part.offset, n);
            a.missing -= n;
        }
    }
    return a;
}

void RankParts::fill(const PlannedPart& part, uint64_t offset, const unsigned char* data, uint64_t size) {
    Assembly& a = owned(part);
    if (a.sent || size > a.missing)
        throw Error(part_name(layout_, part) + ": bytes at offset " + std::to_string(offset) + " arrived twice");
    if (size) std::memcpy(a.bytes.data() + (offset - part.offset), data, size);
    a.missing -= size;
    if (a.missing == 0) {
        a.sent = true;
        ready_(part, std::move(a.bytes));  // the part's bytes go with it
        std::vector<unsigned char>().swap(a.bytes);
    }
}

void RankParts::start() {
    for (const auto& parts : plan_.parts)
        for (const PlannedPart& part : parts)
            if (part.owner == rank_ && part.offset + part.length <= layout_.files[part.file].header.size()) {
                owned(part);
                fill(part, part.offset, nullptr, 0);
            }
}

void RankParts::add(size_t file, uint64_t offset, const unsigned char* data, uint64_t size) {
    while (size > 0) {
        const PlannedPart& part = part_at(plan_, file, offset);
        const uint64_t n = std::min(size, part.offset + part.length - offset);
        if (part.owner == rank_) {
            fill(part, offset, data, n);
        } else {
            const ShareSpan* span = piece_of(part, rank_);
            if (!span || offset < span->begin || offset + n > span->end)
                throw Error(part_name(layout_, part) + ": this rank wrote bytes at offset " + std::to_string(offset) +
                            " outside its planned share");
            auto [it, fresh] = pieces_.try_emplace({file, part.number});
            if (fresh) it->second.bytes.resize(span->end - span->begin);
            std::memcpy(it->second.bytes.data() + (offset - span->begin), data, n);
        }
        offset += n;
        data += n;
        size -= n;
    }
}

std::vector<std::string> RankParts::outgoing_pieces(int ranks) const {
    std::vector<std::string> out(ranks);
    for (const auto& [key, piece] : pieces_) {
        const PlannedPart& part = plan_.parts.at(key.first).at(key.second - 1);
        const ShareSpan* span = piece_of(part, rank_);
        const PieceHeader header{key.first, static_cast<uint64_t>(key.second), span->begin, piece.bytes.size()};
        std::string& to = out.at(part.owner);
        to.append(reinterpret_cast<const char*>(&header), sizeof header);
        to.append(reinterpret_cast<const char*>(piece.bytes.data()), piece.bytes.size());
    }
    return out;
}

void RankParts::take_pieces(const std::vector<std::string>& incoming) {
    for (size_t from = 0; from < incoming.size(); ++from) {
        const std::string& message = incoming[from];
        size_t at = 0;
        while (at < message.size()) {
            PieceHeader header;
            if (message.size() - at < sizeof header) throw Error("a piece from rank " + std::to_string(from) + " is cut short");
            std::memcpy(&header, message.data() + at, sizeof header);
            at += sizeof header;
            if (header.file >= plan_.parts.size() || header.number == 0 || header.number > plan_.parts[header.file].size() ||
                message.size() - at < header.length)
                throw Error("a piece from rank " + std::to_string(from) + " names no planned part");
            const PlannedPart& part = plan_.parts[header.file][header.number - 1];
            if (part.owner != rank_ || header.offset < part.offset || header.offset + header.length > part.offset + part.length)
                throw Error(part_name(layout_, part) + ": rank " + std::to_string(from) + " sent a piece this rank does not own");
            fill(part, header.offset, reinterpret_cast<const unsigned char*>(message.data() + at), header.length);
            at += header.length;
        }
    }
}

void RankParts::check_complete() const {
    for (const auto& parts : plan_.parts)
        for (const PlannedPart& part : parts) {
            if (part.owner != rank_) continue;
            auto it = owned_.find({part.file, part.number});
            if (it == owned_.end() || !it->second.sent)
                throw Error(part_name(layout_, part) + ": " +
                            std::to_string(it == owned_.end() ? part.length : it->second.missing) +
                            " of its bytes never arrived; it was not uploaded");
        }
}

}  // namespace vmerge
