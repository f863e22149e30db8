#pragma once
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// Scans are made on the rank that read the file and all-gathered, so every rank can plan from
// the same metadata without reading every pickle itself. The bytes are a compact binary
// message (format in scan_serialization.cpp); decoding a short or corrupt one throws one Error
// "internal: malformed scan message: FIELD at byte N of M: ...".
std::string serialize_scan(const ScannedFile& scanned);
ScannedFile deserialize_scan(const std::string& text);
// One rank's scans as one message (what the all-gather carries).
std::string serialize_scans(const std::vector<ScannedFile>& scans);
std::vector<ScannedFile> deserialize_scans(const std::string& text);

// The all-gather's messages (rank r's holds the scans of files r, r+P, r+2P, ... of P ranks)
// back into the `files` scans in file order. Each message is released once decoded, so a rank
// never holds all of them twice over.
std::vector<ScannedFile> gathered_scans(std::vector<std::string>& messages, size_t files);

}  // namespace vmerge
