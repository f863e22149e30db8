#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_mapping.h"
#include "plan/rank_work.h"

namespace vmerge {

// A stored record: the file and where its bytes begin in it (StorageRef::file, ::byte_offset).
// A scanned entry and every source view of it name the same record. Not the record's key: the
// archives inside one DCP .distcp file each have their own data/0.
using StorageRecord = std::pair<std::string, uint64_t>;

// Which ranks' shares read each record: the records of the sources their copies take rows
// from (feeds_rows), and of the LoRA factors of the weights they write (read whole by every
// rank writing rows of the weight). Each list ascending, without repeats; a record no share
// reads is absent. What routing a scanned entry to the ranks that copy it asks (scan_routing.h).
using StorageReaders = std::map<StorageRecord, std::vector<int>>;

StorageReaders storage_readers(const TensorMapping& mapping, const std::vector<std::vector<WriteTask>>& work);

}  // namespace vmerge
