#include "formats/hdf5_archive/archive_source.h"

#include <string>

#include "core/error.h"

namespace vmerge {
namespace {

// One dataset: byte ranges of whole rows become row selections.
class ArchiveDatasetReader final : public SourceReader {
public:
    ArchiveDatasetReader(ArchiveReader& reader, size_t tensor) : reader_(reader), tensor_(tensor) {
        const ArchiveTensor& t = reader.tensors().at(tensor);
        row_bytes_ = t.shape.empty() || t.shape[0] == 0 ? t.nbytes() : t.nbytes() / static_cast<uint64_t>(t.shape[0]);
    }

    void read_exact(uint64_t offset, void* out, uint64_t length, const char*) const override {
        if (row_bytes_ == 0 || offset % row_bytes_ || length % row_bytes_)
            throw Error("internal: read of bytes " + std::to_string(offset) + "+" + std::to_string(length) + " of " +
                        reader_.tensors()[tensor_].name + " is not whole rows");
        reader_.read_rows(tensor_, static_cast<int64_t>(offset / row_bytes_),
                          static_cast<int64_t>((offset + length) / row_bytes_), out);
    }

private:
    ArchiveReader& reader_;
    size_t tensor_;
    uint64_t row_bytes_ = 0;
};

}  // namespace

TensorMapping archive_source_mapping(const std::vector<ArchiveTensor>& tensors) {
    TensorMapping mapping;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const ArchiveTensor& a = tensors[i];
        TensorRef source;
        source.dtype = a.dtype;
        source.shape = a.shape;
        source.stride = contiguous_strides(a.shape);
        source.storage.file = std::to_string(i);  // the dataset's index (archive_source_opener)
        source.storage.byte_size = a.nbytes();
        mapping.sources.push_back(std::move(source));
        OutputTensor t;
        t.name = a.name;
        t.source_dtype = t.dtype = a.dtype;
        t.shape = a.shape;
        t.copies.push_back({static_cast<uint32_t>(i), Shape(a.shape.size(), 0), Shape(a.shape.size(), 0), a.shape});
        if (a.chunk_rows > 0) t.row_align = a.chunk_rows;
        mapping.tensors.push_back(std::move(t));
    }
    return mapping;
}

SourceOpener archive_source_opener(ArchiveReader& reader) {
    return [&reader](const std::string& file) -> std::unique_ptr<SourceReader> {
        return std::make_unique<ArchiveDatasetReader>(reader, std::stoul(file));
    };
}

}  // namespace vmerge
