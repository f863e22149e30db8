#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vmerge {

// A compact message between ranks: LEB128 varints, zigzag for signed numbers, strings and
// nested records length-prefixed. The writer appends; the reader checks every read against
// the bytes left and the range the field allows, so a short or corrupt message is one Error
// naming the field and the byte, never a read past the end or a huge allocation.
class BinaryWriter {
public:
    void byte(uint8_t value) { out_.push_back(static_cast<char>(value)); }
    void varint(uint64_t value);
    void zigzag(int64_t value);
    void fixed32(uint32_t value);
    void bytes(std::string_view text);  // length, then the bytes
    const std::string& text() const { return out_; }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

class BinaryReader {
public:
    // `what` names the message in errors ("scan message").
    BinaryReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}
    uint8_t byte(const char* field);
    uint64_t varint(const char* field, uint64_t max = UINT64_MAX);
    int64_t zigzag(const char* field, int64_t lo, int64_t hi);
    uint32_t fixed32(const char* field);
    // A length-prefixed string (a view into the message).
    std::string_view bytes(const char* field);
    // A count of items that take at least `min_bytes` each: at most what the bytes left hold,
    // so a corrupt count cannot make the caller reserve or loop without bound.
    size_t count(const char* field, size_t min_bytes);
    // The next `size` bytes, or Error.
    std::string_view raw(const char* field, size_t size);
    size_t position() const { return at_; }
    bool at_end() const { return at_ == data_.size(); }
    void expect_end(const char* field) const;
    [[noreturn]] void fail(const char* field, const std::string& why) const;

private:
    std::string_view data_;
    size_t at_ = 0;
    std::string what_;
};

}  // namespace vmerge
