#pragma once
#include <vector>

#include "core/source_reader.h"
#include "core/tensor_mapping.h"
#include "formats/hdf5_archive/archive_reader.h"

namespace vmerge {

// An archive as the copy executor's source (converting it back to a Hugging Face folder):
// output tensor i copies dataset i whole, as stored (no cast). Rows of a compressed dataset are
// aligned to its chunks, so each chunk is decompressed once.
TensorMapping archive_source_mapping(const std::vector<ArchiveTensor>& tensors);

// Reads the sources of archive_source_mapping: whole rows of a dataset through `reader`,
// which must outlive the executor (HDF5 is called on the executor's reading thread only).
SourceOpener archive_source_opener(ArchiveReader& reader);

}  // namespace vmerge
