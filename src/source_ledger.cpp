#include "vmerge/source_ledger.h"

#include <set>

#include "vmerge/error.h"

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

SourceLedger::SourceLedger(const std::vector<ScannedFile>& scans, const std::vector<std::string>& item_names) {
    for (size_t i = 0; i < scans.size(); ++i) {
        const ScannedFile& scan = scans[i];
        for (const StateDictEntry& e : scan.tensors) {
            Entry entry;
            const std::string name = i < item_names.size() ? item_names[i] : "key '" + e.key + "'";
            entry.where = scan.path + " " + name;
            entry.empty = numel(e.tensor.shape) == 0;
            if (is_extra_state(e.key)) entry.reason = DropReason::ExtraState;
            by_storage_[{e.tensor.storage.file, e.tensor.storage.byte_offset}].push_back(entries_.size());
            entries_.push_back(std::move(entry));
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
}

void SourceLedger::drop(const TensorRef& source, DropReason reason) {
    auto it = by_storage_.find({source.storage.file, source.storage.byte_offset});
    if (it == by_storage_.end()) return;  // not from a scanned file (an HF base folder)
    for (size_t e : it->second)
        if (!entries_[e].reason) entries_[e].reason = reason;
}

void SourceLedger::drop_output(const OutputTensor& t, const std::vector<TensorRef>& sources, DropReason reason) {
    for (const BoxCopy& c : t.copies)
        if (c.source < sources.size()) drop(sources[c.source], reason);
}

void SourceLedger::drop_unscanned(const std::string& where, DropReason reason) { settled_.emplace_back(where, reason); }

SourceAccount SourceLedger::settle(const TensorMapping& mapping) const {
    std::set<StorageId> written;
    auto mark = [&](const OutputTensor& t) {
        for (const BoxCopy& c : t.copies)
            if (c.source < mapping.sources.size() && numel(c.extent) > 0)
                written.insert({mapping.sources[c.source].storage.file, mapping.sources[c.source].storage.byte_offset});
    };
    for (const OutputTensor& t : mapping.tensors) mark(t);
    for (const LoraDelta& d : mapping.lora_deltas) {
        mark(d.a);
        mark(d.b);
    }
    SourceAccount account;
    auto count_drop = [&](const std::string& where, DropReason reason) {
        const std::string text = drop_reason_text(reason);
        ++account.dropped[text];
        auto& examples = account.examples[text];
        if (examples.size() < kExamplesPerReason) examples.push_back(where);
    };
    std::vector<char> is_written(entries_.size(), 0);
    for (const auto& [storage, ids] : by_storage_)
        if (written.count(storage))
            for (size_t e : ids) is_written[e] = 1;
    for (size_t e = 0; e < entries_.size(); ++e) {
        const Entry& entry = entries_[e];
        if (is_written[e]) ++account.written;
        else if (entry.reason) count_drop(entry.where, *entry.reason);
        else if (entry.empty) count_drop(entry.where, DropReason::EmptyShard);
        else
            throw Error(entry.where + ": neither written nor dropped for a known reason (no output tensor takes "
                                      "its values)");
    }
    for (const auto& [where, reason] : settled_) count_drop(where, reason);
    return account;
}

}  // namespace vmerge
