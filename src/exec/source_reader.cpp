#include "exec/source_reader.h"

#include "io/input_file.h"

namespace vmerge {
namespace {

class FileSourceReader final : public SourceReader {
public:
    explicit FileSourceReader(const std::string& path) : file_(path) {}
    void read_exact(uint64_t offset, void* out, uint64_t length, const char* what) const override {
        file_.read_exact(offset, out, length, what);
    }
    void read_scattered(uint64_t offset, iovec* pieces, size_t count, const char* what) const override {
        file_.read_scattered(offset, pieces, count, what);
    }
    void will_need(uint64_t offset, uint64_t length) const override { file_.will_need(offset, length); }
    void drop_cache(uint64_t offset, uint64_t length) const override { file_.drop_cache(offset, length); }
    // An object: one ranged GET per 64 MiB at most (each GET of the default 1 MiB would cost a
    // round trip; the bytes land in the executor's block either way, no buffer is added).
    uint64_t read_piece_bytes() const override { return file_.is_object() ? uint64_t{64} << 20 : 0; }

private:
    InputFile file_;
};

}  // namespace

std::unique_ptr<SourceReader> open_source_file(const std::string& path) {
    return std::make_unique<FileSourceReader>(path);
}

}  // namespace vmerge
