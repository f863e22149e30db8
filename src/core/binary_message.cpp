#include "core/binary_message.h"

#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {

void BinaryWriter::varint(uint64_t value) {
    while (value >= 0x80) {
        byte(static_cast<uint8_t>(value | 0x80));
        value >>= 7;
    }
    byte(static_cast<uint8_t>(value));
}

void BinaryWriter::zigzag(int64_t value) {
    varint((static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63));
}

void BinaryWriter::fixed32(uint32_t value) {
    for (int k = 0; k < 4; ++k) byte(static_cast<uint8_t>(value >> (8 * k)));
}

void BinaryWriter::bytes(std::string_view text) {
    varint(text.size());
    out_.append(text);
}

void BinaryReader::fail(const char* field, const std::string& why) const {
    throw Error("internal: malformed " + what_ + ": " + field + " at byte " + std::to_string(at_) + " of " +
                std::to_string(data_.size()) + ": " + why);
}

uint8_t BinaryReader::byte(const char* field) {
    if (at_ >= data_.size()) fail(field, "the message ends");
    return static_cast<uint8_t>(data_[at_++]);
}

uint64_t BinaryReader::varint(const char* field, uint64_t max) {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
        const uint8_t b = byte(field);
        // The tenth byte may only hold bit 63.
        if (shift == 63 && (b & 0x7E) != 0) fail(field, "a number longer than 64 bits");
        value |= static_cast<uint64_t>(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        if (shift == 63) fail(field, "a number longer than 64 bits");
    }
    if (value > max) fail(field, std::to_string(value) + " is above " + std::to_string(max));
    return value;
}

int64_t BinaryReader::zigzag(const char* field, int64_t lo, int64_t hi) {
    const uint64_t u = varint(field);
    const int64_t value = static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
    if (value < lo || value > hi) fail(field, std::to_string(value) + " is not within " + range_text(lo, hi));
    return value;
}

uint32_t BinaryReader::fixed32(const char* field) {
    const std::string_view b = raw(field, 4);
    uint32_t value = 0;
    for (int k = 0; k < 4; ++k) value |= static_cast<uint32_t>(static_cast<uint8_t>(b[k])) << (8 * k);
    return value;
}

std::string_view BinaryReader::raw(const char* field, size_t size) {
    if (size > data_.size() - at_)
        fail(field, std::to_string(size) + " bytes, " + std::to_string(data_.size() - at_) + " left");
    const std::string_view out = data_.substr(at_, size);
    at_ += size;
    return out;
}

std::string_view BinaryReader::bytes(const char* field) { return raw(field, varint(field, data_.size() - at_)); }

size_t BinaryReader::count(const char* field, size_t min_bytes) {
    const size_t left = data_.size() - at_;
    return static_cast<size_t>(varint(field, min_bytes ? left / min_bytes : left));
}

void BinaryReader::expect_end(const char* field) const {
    if (!at_end()) fail(field, std::to_string(data_.size() - at_) + " bytes left over");
}

}  // namespace vmerge
