#include "report/inspect_report.h"

#include <algorithm>
#include <iomanip>

#include "core/dtype.h"
#include "core/human_units.h"

namespace vmerge {

void add_tensors_and_plan(InspectReport& report, const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                          const std::vector<std::vector<WriteTask>>& work) {
    for (const auto& t : tensors)
        report.tensors.push_back({t.name, t.shape, std::string(torch_name(t.source_dtype)), std::string(torch_name(t.dtype)),
                                  t.nbytes(), t.copies.size()});
    report.total_bytes = layout.total_size;
    for (const auto& f : layout.files) report.files.push_back({f.name, f.size, f.tensors.size()});
    for (int r = 0; r < report.ranks; ++r) {
        uint64_t bytes = 0;
        for (const auto& task : work[r]) bytes += (task.row_end - task.row_begin) * row_bytes(tensors[task.tensor]);
        report.per_rank.push_back({r, bytes, work[r].size()});
    }
}

InspectReport::Quantization inspect_quantization(const QuantizeSpec& spec, const QuantizationPlan& plan,
                                                 const std::vector<OutputTensor>& tensors) {
    QuantizationParameters parameters = quantization_parameters(spec);
    if (parameters.scale_dtype.empty()) {  // int, FP8_DYNAMIC, FP8_BLOCK: in the weight dtype
        const auto scale = std::find_if(tensors.begin(), tensors.end(), [](const OutputTensor& t) {
            return t.role == OutputTensor::Role::QuantScale;
        });
        std::string_view name = scale == tensors.end() ? "the weight dtype" : torch_name(scale->dtype);
        if (name.starts_with("torch.")) name.remove_prefix(6);
        parameters.scale_dtype = std::string(name);
    }
    return {quant_scheme_name(spec.scheme), quantization_description(spec), parameters, plan.bytes_before,
            plan.bytes_after, plan.ignored_modules, plan.shape_warnings};
}

double exchange_planning_seconds(const ScanExchangeFigures& x) {
    return x.encode_seconds + x.decode_seconds + x.map_seconds + x.plan_seconds;
}

PlanBalance plan_balance(const InspectReport& report) {
    PlanBalance b;
    for (const auto& p : report.per_rank) b.largest = std::max(b.largest, p.bytes);
    b.mean = static_cast<double>(report.total_bytes) / report.ranks;
    b.imbalance = b.mean > 0 ? static_cast<double>(b.largest) / b.mean - 1.0 : 0.0;
    return b;
}

namespace {

nlohmann::ordered_json modelled_rank_json(const ModelledRoutedRank& m) {
    return {{"rank", m.rank}, {"chosen_as", m.chosen_as}, {"received_bytes", m.received_bytes},
            {"received_entries", m.received_entries}, {"input_files", m.input_files}, {"own_files", m.own_files},
            {"checks_seconds", m.checks_seconds}, {"map_seconds", m.map_seconds}, {"plan_seconds", m.plan_seconds},
            {"route_seconds", m.route_seconds}, {"decode_seconds", m.decode_seconds},
            {"compose_seconds", m.compose_seconds}, {"planning_seconds", m.planning_seconds()},
            {"peak_measured", m.peak_measured}, {"resident_before_bytes", m.resident_before_bytes},
            {"resident_peak_bytes", m.resident_peak_bytes}, {"metadata_whole_bytes", m.metadata_whole_bytes},
            {"metadata_share_bytes", m.metadata_share_bytes}, {"over_budget", m.over_budget}};
}

nlohmann::ordered_json routed_planning_json(const RoutedPlanningFigures& x) {
    nlohmann::ordered_json modelled = nlohmann::ordered_json::array();
    for (const ModelledRoutedRank& m : x.modelled) modelled.push_back(modelled_rank_json(m));
    return {{"ranks", x.ranks}, {"files", x.files}, {"shards", x.shards}, {"routed_entries", x.routed_entries},
            {"received_bytes_per_rank_max", x.received_bytes_max}, {"received_bytes_per_rank_mean", x.received_bytes_mean},
            {"received_entries_per_rank_max", x.received_entries_max},
            {"received_entries_per_rank_mean", x.received_entries_mean},
            {"input_files_per_rank_max", x.input_files_max}, {"input_files_per_rank_mean", x.input_files_mean},
            {"sender_seconds_max", x.sender_seconds_max}, {"sweep_seconds", x.sweep_seconds}, {"modelled_ranks", modelled}};
}

// A scheme's parameters: null for what the scheme does not have (no group, no block, no scale
// format), so every scheme states the same keys.
nlohmann::ordered_json quantization_json(const InspectReport::Quantization& q) {
    const QuantizationParameters& p = q.parameters;
    const auto or_null = [](const std::string& text) { return text.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(text); };
    return {{"scheme", q.scheme},
            {"description", q.description},
            {"element", p.element},
            {"bits", p.bits},
            {"strategy", p.strategy},
            {"group_size", p.group_size ? nlohmann::ordered_json(p.group_size) : nlohmann::ordered_json()},
            {"block_size", p.block.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(p.block)},
            {"symmetric", p.symmetric},
            {"scale_dtype", p.scale_dtype},
            {"scale_format", or_null(p.scale_format)},
            {"global_scale", p.global_scale ? nlohmann::ordered_json("float32") : nlohmann::ordered_json()},
            {"bytes_before", q.bytes_before},
            {"bytes_after", q.bytes_after},
            {"ignored", q.ignored},
            {"shape_warnings", q.shape_warnings}};
}

}  // namespace

std::string quantization_parameters_text(const QuantizationParameters& p) {
    std::string text = p.element + ", ";
    if (!p.block.empty())
        text += "a scale per " + std::to_string(p.block[0]) + "x" + std::to_string(p.block[1]) + " block";
    else if (p.group_size)
        text += "a scale per " + std::to_string(p.group_size) + " inputs";
    else
        text += "a scale per output channel";
    text += " (" + p.strategy + "), " + p.scale_dtype + " scales";
    if (!p.scale_format.empty()) text += ", scale format " + p.scale_format;
    if (!p.symmetric) text += ", zero points";
    if (p.global_scale) text += ", a float32 global scale per weight";
    return text;
}

nlohmann::ordered_json inspect_json(const InspectReport& r) {
    nlohmann::ordered_json j = r.facts;
    j["local_dir"] = r.local_dir;
    if (!r.resolved.empty()) j["resolved"] = r.resolved;
    j["hf_config"] = r.hf_config;
    j["scanned_archives"] = r.scanned_archives;
    j["notes"] = r.notes;
    j["source_entries_written"] = r.source_entries_written;
    j["dropped"] = r.dropped;
    if (r.lists_shardings) {
        nlohmann::ordered_json meshes = nlohmann::ordered_json::object();
        for (const auto& [key, names] : r.shardings) meshes[key] = names;
        j["shardings"] = meshes;
    }
    if (!r.backend_json_key.empty()) j[r.backend_json_key] = r.backend_json;
    nlohmann::ordered_json tensor_list = nlohmann::ordered_json::array();
    for (const auto& t : r.tensors)
        tensor_list.push_back({{"name", t.name}, {"shape", t.shape}, {"stored_dtype", t.stored_dtype}, {"dtype", t.dtype},
                               {"bytes", t.bytes}, {"pieces", t.pieces}});
    j["tensors"] = tensor_list;
    j["total_bytes"] = r.total_bytes;
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (const auto& f : r.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"tensors", f.tensors}});
    j["output_files"] = files;
    nlohmann::ordered_json plan = nlohmann::ordered_json::array();
    for (const auto& p : r.per_rank) plan.push_back({{"rank", p.rank}, {"bytes", p.bytes}, {"tasks", p.tasks}});
    j["max_memory_per_rank"] = r.max_memory;
    j["page_cache"] = {{"policy", r.page_cache}, {"reason", r.page_cache_reason}};
    if (const auto& q = r.quantization)
        j["quantization"] = quantization_json(*q);
    if (const auto& l = r.lora)
        j["lora"] = {{"mode", l->merge ? "merge" : "extract"}, {"modules", l->modules}, {"ranks", l->ranks},
                     {"alpha", l->alpha}, {"alpha_source", l->alpha_source}};
    const PlanBalance b = plan_balance(r);
    j["plan"] = {{"ranks", r.ranks}, {"largest_rank_bytes", b.largest}, {"mean_rank_bytes", b.mean},
                 {"largest_over_mean", b.imbalance}, {"plan_seconds", r.plan_seconds},
                 {"total_seconds", r.total_seconds}, {"per_rank", plan}};
    if (const auto& x = r.exchange)
        j["scan_exchange"] = {{"ranks", x->ranks}, {"files", x->files}, {"entries", x->entries},
                              {"received_bytes_per_rank", x->received_bytes}, {"largest_message_bytes", x->largest_message_bytes},
                              {"encode_seconds", x->encode_seconds}, {"decode_seconds", x->decode_seconds},
                              {"map_seconds", x->map_seconds}, {"plan_seconds", x->plan_seconds},
                              {"planning_seconds", exchange_planning_seconds(*x)},
                              {"input_files_per_rank_max", x->input_files_max},
                              {"input_files_per_rank_mean", x->input_files_mean}, {"rank_file_opens", x->rank_file_opens},
                              {"peak_measured", x->peak_measured}, {"resident_before_decode_bytes", x->resident_before_bytes},
                              {"resident_peak_bytes", x->resident_peak_bytes}};
    if (const auto& x = r.routed)
        j["routed_exchange"] = {{"received_bytes_per_rank_max", x->received_bytes_max},
                                {"received_bytes_per_rank_mean", x->received_bytes_mean},
                                {"entries_per_rank_max", x->entries_max}, {"entries_per_rank_mean", x->entries_mean},
                                {"sent_bytes_per_rank_max", x->sent_bytes_max}, {"readers_seconds", x->readers_seconds},
                                {"route_seconds", x->route_seconds}, {"decode_seconds", x->decode_seconds}};
    if (!r.simulated_planning.empty()) {
        j["simulated_planning"] = r.simulated_planning;
        if (!r.simulated_planning_note.empty()) j["simulated_planning_note"] = r.simulated_planning_note;
    }
    if (const auto& x = r.routed_planning) j["routed_planning"] = routed_planning_json(*x);
    return j;
}

namespace {

// A fact as JSON text (null when the mapping did not record it).
nlohmann::ordered_json fact(const InspectReport& r, const char* key) {
    auto it = r.facts.find(key);
    return it == r.facts.end() ? nlohmann::ordered_json() : *it;
}

// The routed planning model's lines: every rank's received share, then each modelled rank's work.
void print_routed_planning(const RoutedPlanningFigures& x, std::ostream& out) {
    out << "routed       " << x.shards << " shards in " << x.files << " rank files, routed to " << x.ranks
        << " ranks: each receives at most " << human_bytes(x.received_bytes_max) << " (mean "
        << human_bytes(x.received_bytes_mean) << "), at most " << x.received_entries_max << " entries (mean "
        << std::setprecision(1) << x.received_entries_mean << "), from at most " << x.input_files_max
        << " input files (mean " << x.input_files_mean << "); the slowest sender's checks and routing "
        << std::setprecision(3) << x.sender_seconds_max << " s\n";
    for (const ModelledRoutedRank& m : x.modelled) {
        out << "rank " << m.rank << " (" << m.chosen_as << ") plans in " << m.planning_seconds() << " s (checks "
            << m.checks_seconds << ", map " << m.map_seconds << ", plan " << m.plan_seconds << ", route "
            << m.route_seconds << ", decode " << m.decode_seconds << ", compose " << m.compose_seconds << "), "
            << human_bytes(m.resident_peak_bytes) << " resident at the peak (" << human_bytes(m.resident_before_bytes)
            << " before" << (m.peak_measured ? "" : "; the kernel keeps no resettable peak: the whole process's")
            << "), metadata " << human_bytes(m.metadata_whole_bytes + m.metadata_share_bytes)
            << (m.over_budget.empty() ? "" : ": over its budget") << "\n";
    }
}

void print_model_lines(const InspectReport& r, std::ostream& out) {
    out << "backend      " << r.backend << ": " << r.description << "\n";
    if (!r.local_dir.empty()) out << "local_dir    " << r.local_dir << "\n";
    for (const auto& step : r.resolved) out << "resolved     " << step << "\n";
    if (!r.hf_config.empty())
        out << "hf_config    " << r.hf_config << "\n"
            << "architecture " << (r.architecture.empty() ? "?" : r.architecture) << "\n";
    if (r.states_parallelism)
        out << "parallelism  tp " << fact(r, "tp") << ", pp " << fact(r, "pp") << ", vpp " << fact(r, "vpp") << ", ep "
            << fact(r, "ep") << "\n";
    for (const auto& note : r.notes) out << "note         " << note << "\n";
    for (const auto& [key, names] : r.shardings) out << "sharding     " << key << ": " << names.size() << " tensors\n";
    for (const auto& [label, text] : r.backend_lines) {
        const std::string padded = label + std::string(label.size() < 12 ? 12 - label.size() : 0, ' ');
        out << padded << " " << text << "\n";
    }
    out << "tensors      " << r.tensors.size() << ", " << human_bytes(r.total_bytes) << "\n";
    for (const auto& f : r.files)
        out << "output       " << f.name << "  " << human_bytes(f.bytes) << ", " << f.tensors << " tensors\n";
    if (const auto& q = r.quantization) {
        out << "quantized    " << q->description << ": " << human_bytes(q->bytes_before) << " -> "
            << human_bytes(q->bytes_after) << " (" << q->ignored.size() << " Linear modules left unquantized)\n";
        out << "quant scheme " << quantization_parameters_text(q->parameters) << "\n";
    }
    if (const auto& l = r.lora) {
        out << "lora         " << l->modules << " adapted modules, r";
        for (size_t i = 0; i < l->ranks.size(); ++i) out << (i ? "/" : " ") << l->ranks[i];
        out << ", lora_alpha " << l->alpha << " (" << l->alpha_source << "): "
            << (l->merge ? "folded into the weights (--merge_lora)" : "exported to lora_adapter/ (--merge_lora folds it)")
            << "\n";
    }
}

void print_plan_lines(const InspectReport& r, std::ostream& out) {
    out << "memory       --max-memory " << human_bytes(r.max_memory) << " per rank"
        << (r.max_memory_automatic
                ? " (auto: a quarter of this node's memory over its ranks, at most half of Slurm's per-rank memory)"
                : "")
        << "\n";
    out << "page cache   " << r.page_cache << " (" << r.page_cache_reason << ")\n";
    const PlanBalance b = plan_balance(r);
    out << "plan for " << r.ranks << " rank" << (r.ranks > 1 ? "s" : "") << ": mean " << human_bytes(b.mean)
        << " per rank, largest " << human_bytes(b.largest) << " (" << std::fixed << std::setprecision(3)
        << 100.0 * b.imbalance << "% over the mean); planned in " << std::setprecision(2) << r.plan_seconds << " s, "
        << r.total_seconds << " s in all\n";
    if (const auto& x = r.exchange) {
        out << "exchange     each of " << x->ranks << " ranks receives " << human_bytes(x->received_bytes) << " of scans ("
            << x->files << " files, " << x->entries << " tensors; largest message " << human_bytes(x->largest_message_bytes)
            << "); encode " << std::setprecision(3) << x->encode_seconds << " s, decode " << x->decode_seconds
            << " s, map " << x->map_seconds << " s, plan " << x->plan_seconds << " s: " << exchange_planning_seconds(*x)
            << " s per rank\n";
        out << "rank memory  " << human_bytes(x->resident_peak_bytes) << " resident at the peak of planning ("
            << human_bytes(x->resident_before_bytes) << " with the messages received"
            << (x->peak_measured ? "" : "; the kernel keeps no resettable peak: the whole process's") << ")\n";
        if (const auto& y = r.routed)
            out << "routed       a merge routing the scans instead would send each rank at most "
                << human_bytes(y->received_bytes_max) << " (mean " << human_bytes(y->received_bytes_mean) << "; at most "
                << y->entries_max << " tensors, mean " << std::setprecision(1) << y->entries_mean << std::setprecision(3)
                << "); readers " << y->readers_seconds << " s, route " << y->route_seconds << " s, decode "
                << y->decode_seconds << " s (a model of the exchange; merges route FSDP DTensor saves only)\n";
        out << "rank inputs  each rank opens at most " << x->input_files_max << " input files (mean " << std::setprecision(1)
            << x->input_files_mean << "; " << x->rank_file_opens << " (rank, file) opens in all)\n";
    }
    if (!r.simulated_planning.empty())
        out << "planning     a merge of it plans "
            << (r.simulated_planning == "routed" ? "routed: modelled below" : "from the all-gather, modelled above")
            << (r.simulated_planning_note.empty() ? "" : " (not routed: " + r.simulated_planning_note + ")") << "\n";
    if (const auto& x = r.routed_planning) print_routed_planning(*x, out);
    // Long plans: the first and last ranks show the pattern.
    const auto& plan = r.per_rank;
    for (size_t k = 0; k < plan.size(); ++k) {
        if (plan.size() > 16 && k == 8) out << "  ...\n";
        if (plan.size() > 16 && k >= 8 && k + 8 < plan.size()) continue;
        out << "  rank " << plan[k].rank << ": " << human_bytes(plan[k].bytes) << " in " << plan[k].tasks
            << " row ranges\n";
    }
}

}  // namespace

void print_inspect_text(const InspectReport& report, std::ostream& out) {
    print_model_lines(report, out);
    print_plan_lines(report, out);
}

}  // namespace vmerge
