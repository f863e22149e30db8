#include "report/merge_summary.h"

#include <algorithm>
#include <iomanip>

#include "core/human_units.h"

namespace vmerge {

nlohmann::ordered_json rank_record_json(const RankMergeRecord& r) {
    const CopyStats& s = r.stats;
    nlohmann::ordered_json j = {
        {"rank", r.rank}, {"host", r.host}, {"scan_s", r.scan_seconds}, {"map_s", r.map_seconds},
        {"plan_s", r.plan_seconds}, {"copy_s", r.copy_seconds}, {"read_s", s.read_seconds},
        {"cast_s", s.cast_seconds}, {"lora_s", s.lora_seconds}, {"write_s", s.sink_seconds}, {"crc_s", s.crc_seconds}, {"hash_s", s.hash_seconds}, {"wait_s", s.wait_seconds},
        {"commit_s", r.commit_seconds},
        {"bytes_read", s.bytes_read}, {"bytes_written", s.bytes_written},
        {"bytes_kept_from_earlier_run", s.bytes_skipped}, {"reads", s.reads},
        {"peak_rss_bytes", r.peak_rss_bytes}, {"planning", r.planning}, {"entries_received", r.entries_received}};
    if (!r.planning_note.empty()) j["planning_note"] = r.planning_note;
    if (!s.quantization_error.empty()) {
        nlohmann::ordered_json errors = nlohmann::ordered_json::object();
        for (const auto& [kind, e] : s.quantization_error) errors[kind] = {e.sum, e.max, e.count};
        j["quantization_error"] = errors;
    }
    return j;
}

MergeTotals merge_totals(const MergeSummary& summary) {
    MergeTotals t;
    for (const auto& r : summary.per_rank) {
        t.resumed_bytes += r["bytes_kept_from_earlier_run"].get<uint64_t>();
        t.rss_min = std::min(t.rss_min, r["peak_rss_bytes"].get<uint64_t>());
        t.rss_max = std::max(t.rss_max, r["peak_rss_bytes"].get<uint64_t>());
        if (!r.contains("quantization_error")) continue;
        for (auto it = r["quantization_error"].begin(); it != r["quantization_error"].end(); ++it) {
            QuantError& e = t.quantization_error[it.key()];
            e.sum += (*it)[0].get<double>();
            e.max = std::max(e.max, (*it)[1].get<double>());
            e.count += (*it)[2].get<uint64_t>();
        }
    }
    return t;
}

nlohmann::ordered_json merge_log_json(const MergeSummary& s) {
    return {{"command", "merge"},     {"local_dir", s.local_dir},   {"target_dir", s.target_dir},
            {"ranks", s.ranks},       {"wall_s", s.wall_seconds},   {"bytes", s.total_bytes},
            {"files", s.files},       {"max_memory", s.max_memory}, {"per_rank", s.per_rank}};
}

namespace {

void print_quantization_lines(const MergeSummary& s, const MergeTotals& t, std::ostream& out) {
    const QuantizeSpec& q = *s.quantize;
    out << "vmerge: quantized to " << quantization_description(q) << ": " << human_bytes(s.quantization.bytes_before) << " -> "
        << human_bytes(s.quantization.bytes_after);
    // Nothing measured when every quantized weight was a block-FP8 source written as it is.
    if (t.quantization_error.empty()) {
        out << "\n";
        return;
    }
    out << "; |dequantized - original| by kind (mean, max):\n";
    for (const auto& [kind, e] : t.quantization_error)
        out << "  " << kind << ": " << std::scientific << std::setprecision(3)
            << (e.count ? e.sum / static_cast<double>(e.count) : 0.0) << ", " << e.max << std::fixed << "\n";
}

}  // namespace

void print_merge_summary(const MergeSummary& s, std::ostream& out) {
    const MergeTotals t = merge_totals(s);
    if (s.resumed)
        out << "vmerge: resumed: " << human_bytes(t.resumed_bytes) << " written by the interrupted run were checked and kept, "
            << human_bytes(s.total_bytes - t.resumed_bytes) << " written now\n";
    const double seconds = s.wall_seconds;
    const bool converted = !s.converted_from.empty();
    out << "vmerge: " << (converted ? "converted " : "merged ") << s.tensors - s.adapter_tensors << " tensors"
        << (s.adapter_tensors ? " and " + std::to_string(s.adapter_tensors) + " adapter tensors" : std::string()) << " ("
        << human_bytes(s.total_bytes) << ") from "
        << (converted ? s.converted_from : std::to_string(s.archives) + " archives") << " into " << s.target_dir << " ("
        << s.files << " file" << (s.files > 1 ? "s" : "") << ") with " << s.ranks << " rank" << (s.ranks > 1 ? "s" : "")
        << " in " << std::fixed << std::setprecision(2) << seconds << " s ("
        << human_rate(seconds > 0 ? static_cast<double>(s.total_bytes - t.resumed_bytes) / seconds : 0.0)
        << " written); peak memory per rank " << human_bytes(t.rss_min) << " .. " << human_bytes(t.rss_max) << "\n";
    if (s.quantize) print_quantization_lines(s, t, out);
}

}  // namespace vmerge
