#include "map_command.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "architecture/architecture_table.h"
#include "architecture/config_expression.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "collective_step.h"
#include "core/dtype.h"
#include "core/box_region.h"
#include "core/error.h"
#include "exec/copy_executor.h"
#include "exec/dtype_cast.h"
#include "exit_code.h"
#include "formats/table_mapping.h"
#include "io/input_file.h"
#include "learned_map/learned_table.h"
#include "learned_map/stacked_experts.h"
#include "merge_inputs.h"
#include "plan/rank_work.h"
#include "rank_resources.h"
#include "safetensors/safetensors_file.h"

namespace vmerge {
namespace {

std::vector<double> as_doubles(const unsigned char* data, DType dtype, size_t count) {
    std::vector<float> floats(count);
    cast_elements(data, dtype, floats.data(), DType::F32, count);
    return {floats.begin(), floats.end()};
}

// The checkpoint's rows, assembled by the copy executor from the mapping's box copies (the
// merge's own reads), one row per request, cast to float32. A row compared on a sample of its
// elements (compared_spans) is read a span at a time: each span a one-row tensor of its own,
// cut from the row's box copies, so that only its bytes are read.
class CheckpointRows final : public RowValues {
public:
    CheckpointRows(TensorMapping mapping, uint64_t budget) : mapping_(std::move(mapping)) {
        for (auto& t : mapping_.tensors) t.dtype = DType::F32;
        executor_ = std::make_unique<CopyExecutor>(mapping_, budget);
        spans_.sources = mapping_.sources;
        spans_.tensors.resize(1);
        span_executor_ = std::make_unique<CopyExecutor>(spans_, budget);
    }
    std::vector<double> row(size_t tensor, int64_t row) override {
        const OutputTensor& t = mapping_.tensors[tensor];
        const std::vector<RowSpan> spans = compared_spans(t.shape);
        if (spans.size() == 1 && numel(spans[0].extent) == row_length(t.shape)) return read(*executor_, tensor, row);
        // A LoRA update or block scales apply to whole rows: such a row is read whole, then sampled.
        if (t.lora_delta || t.source_scales) return subset(read(*executor_, tensor, row), t.shape, spans);
        std::vector<double> values;
        for (const RowSpan& span : spans) {
            OutputTensor& piece = spans_.tensors[0];
            piece = t;
            piece.name = t.name + " (sampled span)";
            piece.shape = Shape{1};
            piece.shape.insert(piece.shape.end(), span.extent.begin(), span.extent.end());
            Shape start{row};
            start.insert(start.end(), span.start.begin(), span.start.end());
            piece.copies.clear();
            extract_region(t, start, piece.shape, Shape(piece.shape.size(), 0), piece.copies);
            const std::vector<double> part = read(*span_executor_, 0, 0);
            values.insert(values.end(), part.begin(), part.end());
        }
        return values;
    }

private:
    static std::vector<double> read(CopyExecutor& executor, size_t tensor, int64_t row = 0) {
        std::vector<double> values;
        executor.run({{tensor, row, row + 1}}, [&](const RowBlock& b) {
            values = as_doubles(b.data, DType::F32, b.size / sizeof(float));
        });
        return values;
    }
    // The elements of `spans` out of a whole row of a tensor of `shape`.
    static std::vector<double> subset(const std::vector<double>& whole, const Shape& shape, const std::vector<RowSpan>& spans) {
        std::vector<double> values;
        for (const RowSpan& span : spans) {
            const int64_t offset = row_offset(shape, span);
            values.insert(values.end(), whole.begin() + offset, whole.begin() + offset + numel(span.extent));
        }
        return values;
    }

    TensorMapping mapping_;
    std::unique_ptr<CopyExecutor> executor_;
    TensorMapping spans_;  // one tensor: the span being read
    std::unique_ptr<CopyExecutor> span_executor_;
};

// Where a base tensor compared lies: an entry of the HfWeights, or one expert's slice of a
// stacked expert entry (stacked_experts.h).
struct BaseEntry {
    size_t file = 0;
    size_t entry = 0;
    int64_t expert = -1;  // >= 0: the slice [expert] of the entry's leading axis
};

// The base model's rows, read from its safetensors files (one pread per row).
class BaseRows final : public RowValues {
public:
    BaseRows(const HfWeights& weights, std::vector<BaseEntry> entries) : weights_(weights), entries_(std::move(entries)) {}
    std::vector<double> row(size_t tensor, int64_t row) override {
        const BaseEntry& at = entries_[tensor];
        const SafetensorsEntry& entry = weights_.files[at.file].entries[at.entry];
        auto& file = files_[at.file];
        if (!file) file = std::make_unique<InputFile>(weights_.files[at.file].path);
        const uint64_t element = element_size(entry.dtype);
        uint64_t begin = entry.begin;
        Shape shape = entry.shape;
        if (at.expert >= 0) {  // one expert's slice: the entry without its leading axis, expert e's elements
            shape.erase(shape.begin());
            begin += static_cast<uint64_t>(at.expert) * static_cast<uint64_t>(numel(shape)) * element;
        }
        const uint64_t row_begin = begin + static_cast<uint64_t>(row) * row_length(shape) * element;
        std::vector<double> values;
        for (const RowSpan& span : compared_spans(shape)) {  // each span contiguous: one pread
            const size_t count = static_cast<size_t>(numel(span.extent));
            std::vector<unsigned char> bytes(count * element);
            file->read_exact(row_begin + static_cast<uint64_t>(row_offset(shape, span)) * element, bytes.data(),
                             bytes.size(), "base tensor row");
            const std::vector<double> part = as_doubles(bytes.data(), entry.dtype, count);
            values.insert(values.end(), part.begin(), part.end());
        }
        return values;
    }

private:
    const HfWeights& weights_;
    std::vector<BaseEntry> entries_;
    std::map<size_t, std::unique_ptr<InputFile>> files_;
};

ModelShape model_shape(const HfConfig& config) {
    ModelShape heads;
    heads.heads = text_config_int(config, "num_attention_heads", 0);
    heads.kv_heads = text_config_int(config, "num_key_value_heads", heads.heads);
    const int64_t hidden = text_config_int(config, "hidden_size", 0);
    heads.head_dim = text_config_int(config, "head_dim", heads.heads > 0 ? hidden / heads.heads : 0);
    heads.vocab = text_config_int(config, "vocab_size", 0);
    heads.layers = text_config_int(config, "num_hidden_layers", 0);
    // The other towers' head counts: an object of config.json besides the text model's with an
    // integer num_heads or num_attention_heads (Qwen2.5-VL's vision_config.num_heads).
    for (auto it = config.json.begin(); it != config.json.end(); ++it) {
        if (!it.value().is_object() || it.key() == "text_config") continue;
        for (const char* key : {"num_heads", "num_attention_heads"})
            if (const auto found = it.value().find(key);
                found != it.value().end() && found->is_number_integer() && found->get<int64_t>() > 1)
                heads.tower_heads.emplace_back(found->get<int64_t>(), it.key() + "." + key);
    }
    return heads;
}

// The checkpoint's floating-point tensors, compared with the base; the others (integer
// buffers) have no weights to compare and are dropped by name.
// A torchtitan tensor of three axes is a grouped expert tensor [E, out, in] or nothing a table
// names: it is compared expert by expert, through views split as the merge splits them.
struct CheckpointSide {
    TensorMapping mapping;
    std::vector<NamedShape> tensors;
    std::vector<std::string> not_floating;
    std::vector<std::string> expert_views;
    // Each grouped tensor's two forms (settle_expert_forms): its transposed whole and its views.
    std::vector<std::pair<size_t, std::vector<size_t>>> expert_forms;
};

// A Megatron MTP key (mtp.layers.k.*) as a merge matches it against the table's rules: the
// decoder layer num_hidden_layers + k (its own modules under ".mtp."), the HF layer number of
// that depth, so that it meets the base's MTP layer and its rules read as the shipped tables'.
std::string megatron_rule_key(const std::string& key, TableSource source, int64_t layers) {
    int64_t depth = 0;
    if (source != TableSource::Megatron) return key;
    return canonical_mtp_key(key, layers, depth).value_or(key);
}

CheckpointSide checkpoint_side(const MappedCheckpoint& mapped, TableSource source, int64_t layers) {
    const TensorMapping& mapping = mapped.mapping;
    CheckpointSide side;
    side.mapping.sources = mapping.sources;
    for (size_t n = 0; n < mapping.tensors.size(); ++n) {
        OutputTensor t = mapping.tensors[n];
        t.name = megatron_rule_key(t.name, source, layers);
        if (!is_floating(t.source_dtype)) {
            side.not_floating.push_back(t.name);
            continue;
        }
        std::vector<OutputTensor> views;
        if (source == TableSource::Torchtitan && t.shape.size() == 3)
            views = split_experts(t, expert_view_pattern(t.name), "", side.mapping.sources);
        else
            views.push_back(t);
        if (source == TableSource::Torchtitan && t.shape.size() == 3) {
            // GPT-OSS's experts are stored [E, out, in], transformers' [E, in, out]: the whole
            // tensor transposed is compared too, and the values choose the form.
            std::vector<size_t> view_indices(views.size());
            for (size_t k = 0; k < views.size(); ++k) view_indices[k] = side.tensors.size() + 1 + k;
            side.expert_forms.emplace_back(side.tensors.size(), std::move(view_indices));
            OutputTensor whole = transposed(t, t.name, side.mapping.sources);
            side.tensors.push_back({whole.name, whole.shape, "", true});
            side.mapping.tensors.push_back(std::move(whole));
        }
        for (auto& v : views) {
            if (views.size() > 1 || v.name != t.name) side.expert_views.push_back(v.name);
            const std::string tp = mapped.tp_assemblies.empty() ? "" : tp_rule_name(mapped.tp_assemblies[n]);
            side.tensors.push_back({v.name, v.shape, tp});
            side.mapping.tensors.push_back(std::move(v));
        }
    }
    return side;
}

// The base's floating-point tensors and where each lies; a stacked expert tensor [E, ...] (E the
// config's expert count, kStackedExpertCount) of a Megatron checkpoint's base is compared expert by
// expert, through its stacked views (a torchtitan checkpoint's grouped experts meet it whole).
struct BaseSide {
    std::vector<NamedShape> tensors;
    std::vector<BaseEntry> entries;
    std::vector<std::string> stacked_views;
};

int64_t config_expert_count(const HfConfig& config) {
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    const ConfigValue count = evaluate(ConfigExpression::parse(kStackedExpertCount, "the expert count"), scope);
    return count.kind == ConfigValue::Kind::Int ? count.integer : 0;
}

BaseSide base_side(const HfWeights& weights, const HfConfig& config, TableSource source) {
    BaseSide side;
    const int64_t experts = source == TableSource::Megatron ? config_expert_count(config) : 0;
    for (const auto& [name, at] : weights.by_name) {
        const SafetensorsEntry& entry = weights.files[at.first].entries[at.second];
        if (!is_floating(entry.dtype)) continue;
        if (!is_stacked_experts(entry.shape, experts)) {
            side.tensors.push_back({name, entry.shape, "", false});
            side.entries.push_back({at.first, at.second, -1});
            continue;
        }
        const Shape slice(entry.shape.begin() + 1, entry.shape.end());
        for (int64_t e = 0; e < experts; ++e) {
            side.stacked_views.push_back(stacked_view_name(name, e));
            side.tensors.push_back({side.stacked_views.back(), slice, "", false});
            side.entries.push_back({at.first, at.second, e});
        }
    }
    return side;
}

// The learned table's identity: named for the base, checked as the base's architecture when
// vmerge knows its tensor set.
// What the table says of tp rules: learned from a legacy save's pieces when tp > 1, else none.
std::string tp_note(const MergeInputs& in) {
    if (in.checkpoint.source->name() == "torchtitan") return "";
    const int64_t tp = in.mapped.facts.value("tp", 1);
    if (in.checkpoint.source->name() == "megatron_legacy" && tp > 1)
        return "; tp rules learned from the tensor-parallel pieces of a legacy save (tp " + std::to_string(tp) + ")";
    return "; learned from a " + std::string(in.checkpoint.source->name() == "megatron_legacy" ? "legacy tp 1" : "torch_dist") +
           " save: no tp rules (a legacy per-rank checkpoint with tp > 1 needs them)";
}

TableIdentity table_identity(const Options& o, const HfConfig& base_config, TableSource source,
                             const ArchitectureTables& tables, const std::string& tp_note) {
    TableIdentity identity;
    identity.source = source;
    identity.architecture = base_config.architectures.empty() ? "" : base_config.architectures[0];
    if (identity.architecture.empty()) throw Error(o.map_base + "/config.json: no architectures[0] to name the table for");
    // The base folder's own name ("Llama-3.1-8B"), also when given as "Llama-3.1-8B/" or ".".
    const std::filesystem::path base = std::filesystem::absolute(o.map_base).lexically_normal();
    const std::string folder = base.has_filename() ? base.filename().string() : base.parent_path().filename().string();
    identity.name = "learned from " + folder;
    const ArchitectureTable* hf = find_architecture_table(tables, "hf", identity.architecture);
    if (hf && hf->tensor_set) identity.config_check = identity.architecture;
    identity.notes = "proposed by vmerge-mpi map from " + o.local_dir + " and the base model " + o.map_base +
                     " (values compared on sampled rows)" + tp_note;
    return identity;
}

// Writes `doc` after checking that vmerge reads it back as a table.
void write_table(const nlohmann::ordered_json& doc, const std::string& path, std::ostream& out) {
    parse_architecture_table(path.empty() ? "the learned table" : path, nlohmann::json::parse(doc.dump()));
    if (path.empty()) {
        out << doc.dump(1) << "\n";
        return;
    }
    // Written beside it and renamed: an interrupted map leaves no half table behind.
    const std::string partial = path + ".partial";
    std::ofstream file(partial);
    file << doc.dump(1) << "\n";
    file.close();
    std::error_code ec;
    if (file) std::filesystem::rename(partial, path, ec);
    if (!file || ec) {
        std::filesystem::remove(partial, ec);
        throw Error(path + ": cannot write the learned table");
    }
    out << "vmerge map: wrote " << path << " (pass it to merge as --architecture_table " << path << ")\n";
}

// Every rank decides its share of the layer groups (decide_tensors) from the same checkpoint
// mapping and base headers; rank 0 gathers the decisions and settles them.
std::optional<MatchResult> shared_matches(const Options& o, Comm& comm, const CheckpointSide& checkpoint,
                                          const BaseSide& base, const HfWeights& weights, const HfConfig& base_config,
                                          TableSource source) {
    std::vector<SourceDecision> mine;
    collective_step(comm, "compare with the base", [&] {
        CheckpointRows checkpoint_rows(checkpoint.mapping, max_memory(o, comm));
        BaseRows base_rows(weights, base.entries);
        mine = decide_tensors(checkpoint.tensors, checkpoint_rows, base.tensors, base_rows, model_shape(base_config),
                              source, comm.rank(), comm.size());
    });
    const std::vector<std::string> gathered = comm.allgather(decisions_json(mine).dump());
    if (comm.rank() != 0) return std::nullopt;
    std::vector<SourceDecision> all;
    for (const auto& text : gathered)
        for (auto& d : decisions_from_json(nlohmann::json::parse(text))) all.push_back(std::move(d));
    return settle_matches(std::move(all), checkpoint.tensors, base.tensors, base_config.tie_word_embeddings);
}

// What map learned (rank 0): the table with its evidence, the document `--architecture_table`
// reads when nothing was refused, and what the checkpoint is.
struct TableProposal {
    LearnedTable table;
    std::optional<nlohmann::ordered_json> doc;
    nlohmann::ordered_json facts;  // the checkpoint's: backend, layout, tp, pp, ...
};

// map's whole path up to the table; nullopt on ranks other than 0.
std::optional<TableProposal> propose_table(const Options& o, Comm& comm) {
    std::shared_ptr<const ArchitectureTables> tables;
    const std::string config_dir = o.hf_config.empty() ? o.map_base : o.hf_config;
    MergeInputs in = load_checkpoint_names(o, config_dir, comm, tables);
    HfConfig base_config;
    HfWeights weights;
    collective_step(comm, "read the base", [&] {
        base_config = load_hf_config(o.map_base);
        weights = read_hf_weights(o.map_base);
    });
    const TableSource source =
        in.checkpoint.source->name() == "torchtitan" ? TableSource::Torchtitan : TableSource::Megatron;
    const BaseSide base = base_side(weights, base_config, source);
    const CheckpointSide checkpoint =
        checkpoint_side(in.mapped, source, text_config_int(base_config, "num_hidden_layers", 0));
    const std::optional<MatchResult> matches = shared_matches(o, comm, checkpoint, base, weights, base_config, source);
    if (comm.rank() != 0) return std::nullopt;
    TableProposal proposal;
    proposal.facts = in.mapped.facts;
    LearnedTable& table = proposal.table;
    MatchResult settled = *matches;
    for (const auto& [whole, views] : checkpoint.expert_forms) settle_expert_forms(settled, whole, views);
    table = learn_table(settled, checkpoint.tensors, base.tensors);
    join_expert_views(table, checkpoint.expert_views);
    join_stacked_views(table, base.tensors, base.stacked_views);
    for (const auto& name : checkpoint.not_floating) add_drop_rule(table, name, "not floating point: a buffer, not a weight");
    if (table.refusals.empty())
        proposal.doc = learned_table_json(table, table_identity(o, base_config, source, *tables, tp_note(in)));
    return proposal;
}

std::string refused_line(const LearnedTable& table) {
    return "vmerge map: no table proposed: the values cannot decide " + std::to_string(table.refusals.size()) +
           (table.refusals.size() == 1 ? " case" : " cases") + " (refused above)\n";
}

// The evidence, then the table written (or printed), or the refusal line and exit 1. --quiet
// keeps the evidence and the "wrote" line for a refusal only: they are then the error.
int report_and_write(const TableProposal& proposal, const Options& o, std::ostream& out) {
    if (!proposal.doc) {
        out << learned_table_report(proposal.table) << refused_line(proposal.table);
        return kExitFailure;
    }
    std::ostringstream discarded;
    std::ostream& said = o.quiet ? discarded : out;
    said << learned_table_report(proposal.table);
    // A table printed (no --out) is the command's output, --quiet or not.
    write_table(*proposal.doc, o.map_out, o.map_out.empty() ? out : said);
    return kExitSuccess;
}

}  // namespace

int run_map(const Options& o, Comm& comm, std::ostream& out) {
    const std::optional<TableProposal> proposal = propose_table(o, comm);
    if (!proposal) return kExitSuccess;
    return report_and_write(*proposal, o, out);
}

int run_suggest_table(const Options& o, Comm& comm, std::ostream& out) {
    const std::optional<TableProposal> proposal = propose_table(o, comm);
    if (!proposal) return kExitSuccess;
    if (o.json) {
        nlohmann::ordered_json doc;
        doc["local_dir"] = o.local_dir;
        doc["base"] = o.map_base;
        for (auto it = proposal->facts.begin(); it != proposal->facts.end(); ++it) doc[it.key()] = it.value();
        doc["suggested_table"] = proposal->doc ? *proposal->doc : nlohmann::ordered_json();
        const nlohmann::ordered_json evidence = learned_table_evidence_json(proposal->table);
        for (auto it = evidence.begin(); it != evidence.end(); ++it) doc[it.key()] = it.value();
        if (proposal->doc && !o.map_out.empty()) {
            std::ostringstream written;
            write_table(*proposal->doc, o.map_out, written);
            doc["written"] = o.map_out;
        }
        out << doc.dump(2) << "\n";
        return proposal->doc ? kExitSuccess : kExitFailure;
    }
    out << "vmerge inspect: the table learned from " << o.map_base << " for " << o.local_dir << " ("
        << proposal->facts.value("layout", std::string()) << ")\n";
    return report_and_write(*proposal, o, out);
}

}  // namespace vmerge
