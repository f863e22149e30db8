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

private:
    InputFile file_;
};

}  // namespace

std::unique_ptr<SourceReader> open_source_file(const std::string& path) {
    return std::make_unique<FileSourceReader>(path);
}

}  // namespace vmerge
