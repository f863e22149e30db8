#include "formats/source_ledger.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "core/error.h"

namespace vmerge {
namespace {

constexpr size_t kExamplesPerReason = 3;

// The values a state dict may hold besides tensors without anything being lost: metadata a
// merge has no use for. Anything else (an object of some class) is not understood.
bool is_plain_value(const std::string& kind) {
    static const std::set<std::string> plain{"None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict"};
    return plain.count(kind) > 0;
}

bool is_extra_state(const std::string& key) { return key.ends_with("_extra_state"); }

}  // namespace

const char* drop_reason_text(DropReason reason) {
    switch (reason) {
        case DropReason::OutsideModel: return "outside the model state dict (optimizer, ...)";
        case DropReason::Replica: return "replica (other DP/EP/TP rank)";
        case DropReason::EmptyShard: return "empty shard";
        case DropReason::ExtraState: return "_extra_state";
        case DropReason::RotaryInvFreq: return "rotary inv_freq buffer";
        case DropReason::NotATensor: return "not a tensor";
        case DropReason::TiedHead: return "tied output layer";
        case DropReason::VocabPadding: return "vocabulary padding";
        case DropReason::Unmapped: return "--allow_unmapped: no HF name";
        case DropReason::BytesItem: return "DCP bytes item";
        case DropReason::TableDrop: return "no HF name (architecture table drop rule)";
        case DropReason::DroppedMtp: return "--drop_mtp: multi-token prediction layer";
        case DropReason::TrainingCopy: return "bit16 training copy (fp32 masters written)";
        case DropReason::PartitionPadding: return "ZeRO partition padding";
        case DropReason::ExcludedFrozen: return "--exclude_frozen_parameters: frozen in training";
        case DropReason::MtpSharedCopy: return "MTP layer's copy of the embedding or lm_head (compared; written from it)";
    }
    return "unknown";
}

size_t SourceAccount::total_dropped() const {
    size_t n = 0;
    for (const auto& [_, count] : dropped) n += count;
    return n;
}

std::string SourceAccount::dropped_text() const {
    const size_t total = total_dropped();
    if (total == 0) return "";
    std::string text = std::to_string(total) + " source " + (total == 1 ? "entry" : "entries") + ":";
    bool first = true;
    for (const auto& [reason, count] : dropped) {
        text += (first ? " " : ", ") + std::to_string(count) + " " + reason;
        first = false;
    }
    return text;
}

SourceLedger::SourceLedger(const std::vector<ScannedFile>& scans, std::vector<std::string> item_names)
    : scans_(scans), item_names_(std::move(item_names)) {
    for (size_t i = 0; i < scans.size(); ++i) {
        const ScannedFile& scan = scans[i];
        for (size_t n = 0; n < scan.tensors.size(); ++n) {
            const StateDictEntry& e = scan.tensors[n];
            Entry entry;
            entry.scan = static_cast<uint32_t>(i);
            entry.index = static_cast<uint32_t>(n);
            entry.empty = numel(e.tensor.shape) == 0;
            if (is_extra_state(e.key)) entry.reason = DropReason::ExtraState;
            const auto file = file_ids_.emplace(e.tensor.storage.file, static_cast<uint32_t>(file_ids_.size())).first;
            by_storage_.push_back({file->second, e.tensor.storage.byte_offset, static_cast<uint32_t>(entries_.size())});
            entries_.push_back(entry);
        }
        for (const SkippedEntry& s : scan.skipped) {
            const std::string where = scan.path + " key '" + s.key + "'";
            if (is_extra_state(s.key)) settled_.emplace_back(where, DropReason::ExtraState);
            else if (is_plain_value(s.kind)) settled_.emplace_back(where + " (" + s.kind + ")", DropReason::NotATensor);
            else
                throw Error(where + ": holds " + s.kind + " where a tensor is expected (not a tensor, not a plain "
                                    "value vmerge can ignore)");
        }
    }
    std::sort(by_storage_.begin(), by_storage_.end());
    dropped_storage_.assign(by_storage_.size(), 0);
}

std::string SourceLedger::where(const Entry& e) const {
    const ScannedFile& scan = scans_[e.scan];
    if (e.scan < item_names_.size()) return scan.path + " " + item_names_[e.scan];
    return scan.path + " key '" + scan.tensors[e.index].key + "'";
}

std::pair<std::vector<SourceLedger::StorageEntry>::const_iterator, std::vector<SourceLedger::StorageEntry>::const_iterator>
SourceLedger::entries_of(const TensorRef& source) const {
    auto file = file_ids_.find(source.storage.file);
    if (file == file_ids_.end()) return {by_storage_.end(), by_storage_.end()};  // not scanned (an HF base folder)
    const StorageEntry low{file->second, source.storage.byte_offset, 0};
    const StorageEntry high{file->second, source.storage.byte_offset, UINT32_MAX};
    return {std::lower_bound(by_storage_.begin(), by_storage_.end(), low),
            std::upper_bound(by_storage_.begin(), by_storage_.end(), high)};
}

void SourceLedger::drop(const TensorRef& source, DropReason reason) {
    const auto [begin, end] = entries_of(source);
    // Once per storage: 500k views of one storage must not cost 500k x 500k steps.
    if (begin == end || dropped_storage_[begin - by_storage_.begin()]) return;
    dropped_storage_[begin - by_storage_.begin()] = 1;
    for (auto it = begin; it != end; ++it)
        if (!entries_[it->entry].reason) entries_[it->entry].reason = reason;
}

void SourceLedger::drop_replica(const std::string& name, const TensorRef& dropped, const TensorRef& kept) {
    drop(dropped, DropReason::Replica);
    replicas_.push_back({name, dropped, kept});
}

void SourceLedger::drop_output(const OutputTensor& t, const std::vector<TensorRef>& sources, DropReason reason) {
    for (const BoxCopy& c : t.copies)
        if (c.source < sources.size()) drop(sources[c.source], reason);
}

void SourceLedger::drop_unscanned(const std::string& where, DropReason reason) { settled_.emplace_back(where, reason); }

SourceAccount SourceLedger::settle(const TensorMapping& mapping) const {
    std::vector<char> written(entries_.size(), 0);
    std::vector<char> storage_written(by_storage_.size(), 0);  // each storage's views marked once
    auto mark = [&](const OutputTensor& t) {
        for (const BoxCopy& c : t.copies) {
            if (c.source >= mapping.sources.size() || numel(c.extent) == 0) continue;
            const auto [begin, end] = entries_of(mapping.sources[c.source]);
            if (begin == end || storage_written[begin - by_storage_.begin()]) continue;
            storage_written[begin - by_storage_.begin()] = 1;
            for (auto it = begin; it != end; ++it) written[it->entry] = 1;
        }
    };
    for (const OutputTensor& t : mapping.tensors) mark(t);
    for (const OutputTensor* side : all_side_inputs(mapping)) mark(*side);
    SourceAccount account;
    // The message text is built only for the few examples kept per reason.
    auto count_drop = [&](DropReason reason, const auto& place) {
        const std::string text = drop_reason_text(reason);
        ++account.dropped[text];
        auto& examples = account.examples[text];
        if (examples.size() < kExamplesPerReason) examples.push_back(place());
    };
    for (size_t e = 0; e < entries_.size(); ++e) {
        const Entry& entry = entries_[e];
        auto place = [&] { return where(entry); };
        if (written[e]) ++account.written;
        else if (entry.reason) count_drop(*entry.reason, place);
        else if (entry.empty) count_drop(DropReason::EmptyShard, place);
        else
            throw Error(where(entry) + ": neither written nor dropped for a known reason (no output tensor takes "
                                       "its values)");
    }
    for (const auto& settled : settled_) count_drop(settled.second, [&] { return settled.first; });
    account.replicas = replicas_;
    return account;
}

}  // namespace vmerge
