#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// Why a source entry is not part of the output: a fixed list, so the summary can count them and
// nothing leaves the merge without one of these names (docs/usage.md, "merge": accounting;
// docs/design.md, "Checkpoint backends").
enum class DropReason {
    OutsideModel,   // an entry of the saved dict outside the model state dict (optimizer, ...)
    Replica,        // the same values saved by another data/expert/tensor-parallel rank
    EmptyShard,     // a shard with no elements (more ranks than rows)
    ExtraState,     // TransformerEngine/Megatron `_extra_state`
    RotaryInvFreq,  // rotary embedding buffers, recomputed by transformers
    NotATensor,     // an int/str/None/container value in the state dict
    TiedHead,       // the output layer of tied embeddings (it is the embedding)
    VocabPadding,   // a shard of only padded vocabulary rows (trimmed to vocab_size)
    Unmapped,       // --allow_unmapped: no Hugging Face name
    BytesItem,      // a DCP bytes item (pickled object, not a tensor)
    TableDrop,      // an architecture table's drop rule: no Hugging Face name (e.g. a router buffer)
    DroppedMtp,     // --drop_mtp: a multi-token prediction layer left out on purpose
    TrainingCopy,   // DeepSpeed's bit16 module copy (the fp32 masters are written instead)
    PartitionPadding,  // a ZeRO-3 rank's flat group past every parameter's end (more ranks than elements)
    ExcludedFrozen,  // --exclude_frozen_parameters: a DeepSpeed parameter frozen in training
    MtpSharedCopy,  // an MTP layer's copy of the embedding or output head: compared with it, written from it
};
const char* drop_reason_text(DropReason reason);

// A source dropped as a replica of another that is kept in its place: the two must hold the
// same values (check_replicas_agree, formats/replica_check.h), or one output tensor has two
// different sources and either choice would be silently wrong.
struct ReplicaPair {
    std::string name;  // the tensor, for messages
    TensorRef dropped, kept;
};

// The accounting of one merge: how many source entries were written and how many dropped
// for each reason, with a few examples per reason.
struct SourceAccount {
    std::vector<ReplicaPair> replicas;  // every drop_replica, for the check before the copy
    size_t written = 0;
    std::map<std::string, size_t> dropped;                 // reason text -> count
    std::map<std::string, std::vector<std::string>> examples;  // reason text -> "file key", first few
    size_t total_dropped() const;
    // "12 source tensors: 8 _extra_state, 4 replica (other DP/EP/TP rank)"; "" when none.
    std::string dropped_text() const;
};

// Every entry of every scanned state dict is opened as an account; the mapping code drops
// entries with a reason; settle() marks every entry whose storage feeds an output tensor as
// written and fails for any entry that is neither (an entry lost without a word).
class SourceLedger {
public:
    // One account per tensor entry of `scans`, which must outlive the ledger (messages name
    // their entries from them). Non-tensor values are settled at once: known plain values
    // (None, int, str, containers) and `_extra_state` are dropped with their reason; an
    // unrecognised object where a tensor is expected is an Error naming file and key.
    // `item_names[i]`, when given, names scan i's entries in messages (a DCP item's fqn).
    explicit SourceLedger(const std::vector<ScannedFile>& scans, std::vector<std::string> item_names = {});
    SourceLedger(std::vector<ScannedFile>&& scans, std::vector<std::string> item_names = {}) = delete;

    // Drops the entry whose storage `source` views.
    void drop(const TensorRef& source, DropReason reason);
    // Drops `dropped` as a replica of `kept` (DropReason::Replica), recorded for the check.
    void drop_replica(const std::string& name, const TensorRef& dropped, const TensorRef& kept);
    // Drops every entry that feeds one of `t`'s copies.
    void drop_output(const OutputTensor& t, const std::vector<TensorRef>& sources, DropReason reason);
    // An item that was never scanned (a DCP bytes item): counted as dropped.
    void drop_unscanned(const std::string& where, DropReason reason);

    // Written: feeds a copy of `mapping` (LoRA deltas included). Throws Error naming the file
    // and key of the first entry neither written nor dropped.
    SourceAccount settle(const TensorMapping& mapping) const;

private:
    // Compact, as a cluster-scale FSDP checkpoint has millions of entries: an entry is its
    // scan and index, a storage its file number and byte offset.
    struct Entry {
        uint32_t scan = 0, index = 0;
        bool empty = false;
        std::optional<DropReason> reason;
    };
    struct StorageEntry {
        uint32_t file = 0;
        uint64_t offset = 0;
        uint32_t entry = 0;
        auto operator<=>(const StorageEntry&) const = default;
    };
    std::string where(const Entry& e) const;
    // The entries whose storage `source` views (tied weights may share one).
    std::pair<std::vector<StorageEntry>::const_iterator, std::vector<StorageEntry>::const_iterator> entries_of(
        const TensorRef& source) const;

    const std::vector<ScannedFile>& scans_;
    std::vector<std::string> item_names_;
    std::map<std::string, uint32_t> file_ids_;
    std::vector<Entry> entries_;
    std::vector<StorageEntry> by_storage_;                     // sorted
    std::vector<std::pair<std::string, DropReason>> settled_;  // non-tensors and unscanned items
    std::vector<ReplicaPair> replicas_;
    std::vector<char> dropped_storage_;  // by the index of a storage's first entry in by_storage_
};

}  // namespace vmerge
