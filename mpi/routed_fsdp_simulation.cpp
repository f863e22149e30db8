#include "routed_fsdp_simulation.h"

#include <algorithm>

#include "core/error.h"
#include "core/resident_memory.h"
#include "core/stopwatch.h"
#include "formats/fsdp/fsdp_routing.h"
#include "fsdp_shard_routing.h"
#include "routed_message_store.h"
#include "routed_share_tally.h"
#include "scan_routing.h"

namespace vmerge {
namespace {

// The files rank `rank` of `ranks` scans: rank, rank + P, ...
std::vector<ScannedFile> own_files(const RoutedSimulationInput& in, int rank) {
    std::vector<ScannedFile> mine;
    for (size_t f = static_cast<size_t>(rank); f < in.files; f += static_cast<size_t>(in.ranks)) mine.push_back(in.rank_file(f));
    return mine;
}

std::vector<FsdpFileCheck> checks_of(const std::vector<ScannedFile>& mine, const ScannedFile& first, int rank,
                                     const RoutedSimulationInput& in) {
    std::vector<FsdpFileCheck> checks;
    for (size_t i = 0; i < mine.size(); ++i)
        checks.push_back(check_fsdp_file(mine[i], static_cast<size_t>(rank) + i * in.ranks, first, in.files));
    return checks;
}

// Every file's check as a rank decodes the all-gathered messages, in file order.
std::vector<FsdpFileCheck> every_check(const std::vector<std::string>& messages) {
    std::vector<FsdpFileCheck> every;
    for (const std::string& message : messages)
        for (FsdpFileCheck& check : deserialize_file_checks(message)) every.push_back(std::move(check));
    std::sort(every.begin(), every.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
    return every;
}

bool same_rows(const std::vector<WriteTask>& a, const std::vector<WriteTask>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const WriteTask& x, const WriteTask& y) {
        return x.tensor == y.tensor && x.row_begin == y.row_begin && x.row_end == y.row_end;
    });
}

// A sender holds its files' scans at once, as a merge rank holds what it scanned: with few
// ranks for many files that is most of the save (the all-gather model's limit, in shards).
constexpr uint64_t kMaxShardsPerRank = 6'000'000;

void refuse_what_one_rank_cannot_hold(const RoutedSimulationInput& in, size_t keys) {
    const uint64_t files = (in.files + static_cast<size_t>(in.ranks) - 1) / static_cast<size_t>(in.ranks);
    if (files * keys > kMaxShardsPerRank)
        throw Error("simulated routed merge of " + std::to_string(in.files) + " rank files over " +
                    std::to_string(in.ranks) + " ranks: a rank scans " + std::to_string(files) + " files of " +
                    std::to_string(keys) + " DTensors, " + std::to_string(files * keys) +
                    " shards held at once, more than this model holds (" + std::to_string(kMaxShardsPerRank) +
                    "); a merge rank would hold them too: use more ranks (--np)");
}

struct Sweep {
    std::vector<std::string> check_messages;  // each sender's, as it all-gathers them
    RoutedShareTally tally;
    RoutedMessageStore store;
    // A rank with no file to scan sends an empty list of checks.
    explicit Sweep(int ranks)
        : check_messages(static_cast<size_t>(ranks), serialize_file_checks({})), tally(ranks), store(ranks) {}
};

// Step 1: every sender's files made, checked, routed and tallied, one sender at a time. The
// plan routed against is the skeleton's, mapped with file 0's check alone (the checks of the
// other files change only the dropped-entries note, not the tensors: the modelled rank maps
// with all of them and must plan the same rows).
void sweep_senders(const RoutedSimulationInput& in, const ScannedFile& first, const TensorMapping& skeleton,
                   const std::vector<std::vector<WriteTask>>& work, Sweep& sweep, RoutedPlanningFigures& figures) {
    const auto start = Clock::now();
    for (int s = 0; s < in.ranks && static_cast<size_t>(s) < in.files; ++s) {
        const std::vector<ScannedFile> mine = own_files(in, s);
        const auto sender_start = Clock::now();
        sweep.check_messages[s] = serialize_file_checks(checks_of(mine, first, s, in));
        const StorageReaders readers = fsdp_shard_readers(mine, first, skeleton, work);
        const std::vector<std::string> messages = routed_scan_messages(mine, readers, in.ranks);
        figures.sender_seconds_max = std::max(figures.sender_seconds_max, seconds_since(sender_start));
        sweep.tally.add_sender(mine, readers, messages);
        for (size_t r = 0; r < messages.size(); ++r) sweep.store.put(static_cast<int>(r), messages[r]);
        for (const ScannedFile& file : mine) figures.shards += file.tensors.size();
    }
    figures.sweep_seconds = seconds_since(start);
}

void sum_over_ranks(const RoutedShareTally& tally, RoutedPlanningFigures& figures) {
    const double ranks = static_cast<double>(tally.bytes().size());
    uint64_t bytes = 0, entries = 0, files = 0;
    for (size_t r = 0; r < tally.bytes().size(); ++r) {
        figures.received_bytes_max = std::max(figures.received_bytes_max, tally.bytes()[r]);
        figures.received_entries_max = std::max(figures.received_entries_max, tally.entries()[r]);
        figures.input_files_max = std::max(figures.input_files_max, tally.files()[r]);
        bytes += tally.bytes()[r];
        entries += tally.entries()[r];
        files += tally.files()[r];
    }
    figures.routed_entries = entries;
    figures.received_bytes_mean = static_cast<double>(bytes) / ranks;
    figures.received_entries_mean = static_cast<double>(entries) / ranks;
    figures.input_files_mean = static_cast<double>(files) / ranks;
}

// Step 2 for rank `p`: its planning, timed step by step, its resident peak read at the end.
ModelledRoutedRank model_rank(const RoutedSimulationInput& in, int p, const Sweep& sweep,
                              const std::vector<std::vector<WriteTask>>& swept_work) {
    ModelledRoutedRank m;
    m.rank = p;
    m.received_bytes = sweep.tally.bytes()[p];
    m.received_entries = sweep.tally.entries()[p];
    m.input_files = sweep.tally.files()[p];
    m.peak_measured = reset_resident_peak();
    m.resident_before_bytes = resident_bytes();
    // What its scan and the broadcast give it (the scan's own cost is not planning's).
    const std::vector<ScannedFile> mine = own_files(in, p);
    const ScannedFile first = in.rank_file(0);
    m.own_files = mine.size();
    auto start = Clock::now();
    std::vector<std::string> check_messages = sweep.check_messages;
    if (static_cast<size_t>(p) < check_messages.size()) check_messages[p] = serialize_file_checks(checks_of(mine, first, p, in));
    const std::vector<FsdpFileCheck> checks = every_check(check_messages);
    std::string why_not = routing_verdict(checks, in.files);
    m.checks_seconds = seconds_since(start);
    if (!why_not.empty()) throw Error("internal: the simulated save failed the routing checks: " + why_not);
    start = Clock::now();
    std::optional<MappedModel> model = routed_skeleton_model(first, checks, in.map_skeleton, why_not);
    m.map_seconds = seconds_since(start);
    if (!model) throw Error("internal: the skeleton mapped with every file's check could not be routed: " + why_not);
    start = Clock::now();
    const auto work = routed_rank_work(model->mapped.mapping.tensors, in.max_shard_size, in.ranks);
    m.plan_seconds = seconds_since(start);
    if (!same_rows(work.at(p), swept_work.at(p))) throw Error("internal: the modelled rank planned other rows than the sweep");
    start = Clock::now();
    StorageReaders readers = fsdp_shard_readers(mine, first, model->mapped.mapping, work);
    std::vector<std::string> outgoing = routed_scan_messages(mine, readers, in.ranks);
    m.route_seconds = seconds_since(start);
    // The exchange: it holds its outgoing messages until what it receives has arrived.
    std::vector<std::string> received_messages = sweep.store.received_by(p);
    uint64_t bytes = 0;
    for (const std::string& message : received_messages) bytes += message.size();
    if (bytes != m.received_bytes) throw Error("internal: the modelled rank received other messages than the sweep's");
    std::vector<std::string>().swap(outgoing);
    StorageReaders().swap(readers);
    start = Clock::now();
    const std::vector<ScannedFile> received = received_scans(received_messages);
    m.decode_seconds = seconds_since(start);
    uint64_t entries = 0;
    for (const ScannedFile& file : received) entries += file.tensors.size();
    if (entries != m.received_entries) throw Error("internal: the modelled rank decoded other entries than the sweep sent");
    start = Clock::now();
    const TensorMapping mapping = compose_routed_mapping(model->mapped.mapping, first, received, work.at(p));
    const MetadataBytes metadata = mapping_metadata_bytes(mapping);
    m.over_budget = metadata_over_budget(entries, metadata, in.budget, in.ranks);
    m.compose_seconds = seconds_since(start);
    m.metadata_whole_bytes = metadata.whole;
    m.metadata_share_bytes = metadata.share;
    m.resident_peak_bytes = resident_peak_bytes();
    return m;
}

}  // namespace

RoutedFsdpSimulation simulate_routed_fsdp(const RoutedSimulationInput& in) {
    RoutedFsdpSimulation result;
    RoutedPlanningFigures& figures = result.figures;
    figures.ranks = in.ranks;
    figures.files = in.files;
    std::vector<std::vector<WriteTask>> work;
    Sweep sweep(in.ranks);
    {
        const ScannedFile first = in.rank_file(0);
        refuse_what_one_rank_cannot_hold(in, first.tensors.size());
        std::optional<MappedModel> model = routed_skeleton_model(
            first, {check_fsdp_file(first, 0, first, in.files)}, in.map_skeleton, result.why_not);
        if (!model) return result;
        work = routed_rank_work(model->mapped.mapping.tensors, in.max_shard_size, in.ranks);
        sweep_senders(in, first, model->mapped.mapping, work, sweep, figures);
    }
    const std::string verdict = routing_verdict(every_check(sweep.check_messages), in.files);
    if (!verdict.empty()) {
        result.why_not = verdict;
        return result;
    }
    sum_over_ranks(sweep.tally, figures);
    std::vector<int> chosen{rank_of_most(sweep.tally.bytes())};
    const int most_entries = rank_of_most(sweep.tally.entries());
    if (most_entries != chosen[0]) chosen.push_back(most_entries);
    sweep.store.keep_only(chosen);
    for (const int p : chosen) {
        ModelledRoutedRank m = model_rank(in, p, sweep, work);
        m.chosen_as = p == chosen[0] ? "most bytes received" : "most entries received";
        figures.modelled.push_back(std::move(m));
    }
    // The report's tensors and plan: the skeleton's mapping, with every file's check.
    const ScannedFile first = in.rank_file(0);
    std::string why_not;
    result.model = routed_skeleton_model(first, every_check(sweep.check_messages), in.map_skeleton, why_not);
    return result;
}

}  // namespace vmerge
