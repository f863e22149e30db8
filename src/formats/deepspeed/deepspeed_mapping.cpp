#include "formats/deepspeed/deepspeed_mapping.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "core/bounded_number.h"
#include "core/error.h"
#include "core/human_units.h"
#include "formats/checkpoint.h"
#include "formats/deepspeed/deepspeed_scan.h"
#include "formats/deepspeed/flat_partition.h"

namespace vmerge {
namespace {

// The entries of one scanned file whose keys start with `prefix`, by the rest of the key.
std::unordered_map<std::string, const TensorRef*> entries_under(const ScannedFile& scan, const std::string& prefix) {
    std::unordered_map<std::string, const TensorRef*> out;
    for (const auto& e : scan.tensors)
        if (e.key.starts_with(prefix)) out.emplace(e.key.substr(prefix.size()), &e.tensor);
    return out;
}

// A run of elements the copy can read as [offset, offset + numel) of its storage.
void require_flat(const TensorRef& t, const std::string& where) {
    if (!t.is_contiguous()) throw Error(where + ": not a contiguous tensor (stride " + shape_to_string(t.stride) + ")");
}

// The loaded checkpoint: what every step of the mapping reads.
struct Zero {
    Zero(const DeepSpeedCheckpoint& checkpoint, const std::vector<ScannedFile>& scanned) : c(checkpoint), scans(scanned) {}
    const DeepSpeedCheckpoint& c;
    const std::vector<ScannedFile>& scans;
    int stage = 0;
    size_t world = 0;
    ModelFacts model;
    std::vector<std::vector<const TensorRef*>> flats;  // [rank][flat group]
    std::vector<std::unordered_map<std::string, const TensorRef*>> module, frozen;  // per model file
    std::vector<const TensorRef*> padding_flats;  // ZeRO-3 flats whose every piece lies past its numel
    std::set<std::string> frozen_names;  // frozen_param_shapes' and the frozen parameters taken from the module
    TensorMapping mapping;

    const ScannedFile& optim_scan(size_t r) const { return scans[r]; }
    const ScannedFile& model_scan(size_t i) const { return scans[c.optim_files.size() + i]; }
    std::vector<std::string> optim_paths() const { return {c.optim_files.begin(), c.optim_files.end()}; }
    std::string flat_key(size_t g) const { return std::string(stage == 3 ? kZero3FlatPrefix : kZero2FlatPrefix) + std::to_string(g); }
    std::string group_name(size_t g) const { return (stage == 3 ? "sub-group " : "param group ") + std::to_string(g); }
};

void read_stage_and_world(Zero& z) {
    const size_t files = z.c.optim_files.size();
    for (size_t r = 0; r < files; ++r) {
        const OptimFacts f = optim_facts(z.optim_scan(r));
        const std::string& path = z.optim_scan(r).path;
        if (!f.zero_stage)
            throw Error(path + ": its optimizer_state_dict has no zero_stage: a BF16_Optimizer checkpoint (bf16 without "
                               "ZeRO, or ZeRO-1 with an fp32 grad_accum_dtype), which is not supported");
        if (*f.zero_stage < 1 || *f.zero_stage > 3)
            throw Error(path + ": zero_stage " + std::to_string(*f.zero_stage) + " is not supported (ZeRO stages 1, 2, 3)");
        if (r == 0) {
            z.stage = *f.zero_stage;
            if (f.partition_count.empty()) throw Error(path + ": no partition_count");
            z.world = static_cast<size_t>(*std::max_element(f.partition_count.begin(), f.partition_count.end()));
        } else if (*f.zero_stage != z.stage) {
            throw Error(path + ": zero_stage " + std::to_string(*f.zero_stage) + " but rank 0's file says " +
                        std::to_string(z.stage));
        }
    }
    if (z.world != files)
        throw Error(z.c.tag_dir + ": partition_count says " + std::to_string(z.world) +
                    " data-parallel ranks but the folder has " + std::to_string(files) +
                    " *_optim_states.pt files (an overwritten or incomplete save?)");
    const bool per_rank = z.stage == 3;
    if (per_rank != z.c.per_rank_model_files)
        throw Error(z.c.tag_dir + ": zero_stage " + std::to_string(z.stage) + " but " +
                    (z.c.per_rank_model_files ? "zero_pp_rank_*_model_states.pt files (a ZeRO-3 layout)"
                                              : "one mp_rank_00_model_states.pt (a ZeRO-1/2 layout)"));
    z.model = model_facts(z.model_scan(0));
    if (z.model.dp_world_size && static_cast<size_t>(*z.model.dp_world_size) != z.world)
        throw Error(z.model_scan(0).path + ": dp_world_size " + std::to_string(*z.model.dp_world_size) +
                    " but the optimizer files have " + std::to_string(z.world) + " partitions");
    if (z.model.optimizer_offload == "nvme")
        throw Error(z.model_scan(0).path + ": ds_config offloads the optimizer to NVMe; its fp32 masters live in swap "
                                           "files, which are not supported");
}

// Each parameter lives in exactly one place: a name listed twice (in two groups, or twice in
// one) would be merged from one of them while the other's elements went unread.
void require_distinct_names(const Zero& z) {
    std::unordered_map<std::string, std::string> place;  // name -> where it was first listed
    auto claim = [&](const std::string& name, const std::string& where) {
        const auto [it, fresh] = place.emplace(name, where);
        if (!fresh)
            throw Error(z.model_scan(0).path + ": parameter '" + name + "' is listed " +
                        (it->second == where ? "twice in " + where : "in " + it->second + " and in " + where) +
                        "; each parameter belongs to one group");
    };
    for (size_t g = 0; g < z.model.param_shapes.size(); ++g)
        for (const auto& [name, _] : z.model.param_shapes[g]) claim(name, "param_shapes " + z.group_name(g));
    if (z.model.frozen_param_shapes)
        for (const auto& [name, _] : *z.model.frozen_param_shapes) claim(name, "frozen_param_shapes");
}

void index_files(Zero& z) {
    const std::string prefix = z.stage == 3 ? kZero3FlatPrefix : kZero2FlatPrefix;
    const size_t groups = z.model.param_shapes.size();
    for (size_t r = 0; r < z.world; ++r) {
        const ScannedFile& scan = z.optim_scan(r);
        std::vector<const TensorRef*> flats(groups, nullptr);
        for (const auto& [index, tensor] : entries_under(scan, prefix)) {
            const auto number = parse_int_within(index, 0, static_cast<int64_t>(groups) - 1);
            if (!number || index != std::to_string(*number))
                throw Error(scan.path + ": fp32 flat group '" + index + "' but param_shapes has " + std::to_string(groups) + " groups");
            const size_t g = static_cast<size_t>(*number);
            require_flat(*tensor, scan.path + " key '" + prefix + index + "'");
            // An integer "master" would be written as integer weights: nothing a trainer saves.
            if (!is_floating(tensor->dtype))
                throw Error(scan.path + " key '" + prefix + index + "' (" + z.group_name(g) + "): the fp32 master partition holds " +
                            std::string(torch_name(tensor->dtype)) + " elements; ZeRO master weights are floating point");
            flats[g] = tensor;
        }
        for (size_t g = 0; g < groups; ++g)
            if (!flats[g])
                throw Error(scan.path + ": no " + prefix + std::to_string(g) + " (param_shapes has " + std::to_string(groups) +
                            " groups)");
        z.flats.push_back(std::move(flats));
    }
    for (size_t i = 0; i < z.c.model_files.size(); ++i) {
        z.module.push_back(entries_under(z.model_scan(i), kModulePrefix));
        z.frozen.push_back(entries_under(z.model_scan(i), kFrozenPrefix));
    }
}

// One output tensor per parameter, its copies out of the flat runs `slices` names.
OutputTensor from_slices(Zero& z, const std::string& name, const Shape& shape, const std::vector<FlatSlice>& slices,
                         const std::vector<const TensorRef*>& flats) {
    OutputTensor t;
    t.name = name;
    t.shape = shape;
    const Shape stride = contiguous_strides(shape);
    bool first = true;
    for (const FlatSlice& s : slices) {
        const TensorRef& flat = *flats[s.flat];
        if (first) t.source_dtype = t.dtype = flat.dtype;
        if (flat.dtype != t.source_dtype) throw Error(name + ": its pieces have different dtypes");
        first = false;
        for (const IndexBox& box : flat_range_boxes(shape, s.param_offset, s.param_offset + s.length)) {
            int64_t at = 0;
            for (size_t d = 0; d < box.start.size(); ++d) at += box.start[d] * stride[d];
            TensorRef view;
            view.dtype = flat.dtype;
            view.storage = flat.storage;
            view.storage_offset = flat.storage_offset + s.flat_offset + (at - s.param_offset);
            view.shape = box.extent;
            view.stride = stride;
            t.copies.push_back({static_cast<uint32_t>(z.mapping.sources.size()), Shape(shape.size(), 0), box.start, box.extent});
            z.mapping.sources.push_back(std::move(view));
        }
    }
    return t;
}

std::vector<FlatParam> params_of(const NamedShapes& shapes) {
    std::vector<FlatParam> out;
    for (const auto& [name, shape] : shapes) out.push_back({name, shape});
    return out;
}

// Each rank's group_paddings entry is what its saved partition lacks of the full partition
// (the inspect and merge summaries count it as padding).
void require_group_paddings(const Zero& z, size_t g, const std::string& group, const Zero2Layout& layout) {
    for (size_t r = 0; r < z.world; ++r) {
        const auto paddings = optim_facts(z.optim_scan(r)).group_paddings;
        if (paddings.size() <= g) continue;  // not saved (zero_to_fp32 does not read it either)
        const int64_t expected = layout.partition - layout.saved[r];
        if (paddings[g] != expected)
            throw Error(z.optim_scan(r).path + ": " + group + ": group_paddings says " + std::to_string(paddings[g]) +
                        " padding elements, but a partition of " + std::to_string(layout.partition) + " saved as " +
                        std::to_string(layout.saved[r]) + " has exactly " + std::to_string(expected));
    }
}

// ZeRO-1/2: each param group's parameters out of its W saved partitions.
std::map<std::string, OutputTensor> trainable_zero2(Zero& z) {
    std::map<std::string, OutputTensor> out;
    const auto& groups = z.model.param_shapes;
    // Padding between parameters (parameter_alignment): the same on every rank, zero_to_fp32
    // reads rank 0's; a file without the key (DeepSpeed < 0.19) has none.
    const OptimFacts first = optim_facts(z.optim_scan(0));
    const auto& aligned = first.param_alignment_paddings;
    if (!aligned.empty() && aligned.size() != groups.size())
        throw Error(z.optim_scan(0).path + ": param_alignment_paddings has " + std::to_string(aligned.size()) +
                    " groups but param_shapes has " + std::to_string(groups.size()));
    for (size_t g = 0; g < groups.size(); ++g) {
        // A group partitioned over fewer ranks is an expert-parallel (MoE) group: another layout.
        if (first.partition_count.size() == groups.size() && static_cast<size_t>(first.partition_count[g]) != z.world)
            throw Error(z.optim_scan(0).path + ": partition_count of " + z.group_name(g) + " is " +
                        std::to_string(first.partition_count[g]) + ", not the checkpoint's " + std::to_string(z.world) +
                        " ranks (an expert-parallel MoE group, which is not supported)");
        std::vector<int64_t> lengths;
        std::vector<const TensorRef*> flats;
        for (size_t r = 0; r < z.world; ++r) {
            lengths.push_back(numel(z.flats[r][g]->shape));
            flats.push_back(z.flats[r][g]);
        }
        const auto params = params_of(groups[g]);
        const std::string group = z.flat_key(g) + " (" + z.group_name(g) + ")";
        const Zero2Group slices =
            zero2_group_slices(params, lengths, z.optim_paths(), group, aligned.empty() ? std::vector<int64_t>{} : aligned[g]);
        require_group_paddings(z, g, group, slices.layout);
        for (size_t i = 0; i < params.size(); ++i)
            out.emplace(params[i].name, from_slices(z, params[i].name, params[i].shape, slices.params[i], flats));
    }
    return out;
}

// ZeRO-3: every parameter out of the W ranks' pieces in its sub-group's flats; a rank's flat
// that holds only padding (more ranks than a small sub-group's elements) is noted for the ledger.
std::map<std::string, OutputTensor> trainable_zero3(Zero& z) {
    std::map<std::string, OutputTensor> out;
    std::vector<std::vector<FlatParam>> groups;
    for (const auto& g : z.model.param_shapes) groups.push_back(params_of(g));
    std::vector<std::vector<int64_t>> lengths(z.world);
    std::vector<const TensorRef*> flats;
    for (size_t r = 0; r < z.world; ++r)
        for (const TensorRef* f : z.flats[r]) {
            lengths[r].push_back(numel(f->shape));
            flats.push_back(f);
        }
    const Zero3Slices slices = zero3_slices(groups, lengths, z.optim_paths());
    size_t i = 0;
    for (const auto& group : groups)
        for (const auto& p : group) out.emplace(p.name, from_slices(z, p.name, p.shape, slices.params[i++], flats));
    for (size_t flat : slices.padding_only) z.padding_flats.push_back(flats[flat]);
    return out;
}

// Trainable parameters: name -> output tensor.
std::map<std::string, OutputTensor> trainable(Zero& z) { return z.stage <= 2 ? trainable_zero2(z) : trainable_zero3(z); }

// Frozen parameters: ZeRO-3 from every rank's ps-element fragment, ZeRO-2 from rank 0's whole one.
std::map<std::string, OutputTensor> frozen(Zero& z) {
    std::map<std::string, OutputTensor> out;
    if (!z.model.frozen_param_shapes) return out;
    for (const auto& [name, shape] : *z.model.frozen_param_shapes) {
        std::vector<const TensorRef*> fragments;
        std::vector<int64_t> lengths;
        std::vector<std::string> files;
        for (size_t i = 0; i < z.c.model_files.size(); ++i) {
            auto it = z.frozen[i].find(name);
            if (it == z.frozen[i].end())
                throw Error(z.model_scan(i).path + ": frozen_param_fragments has no '" + name + "' (frozen_param_shapes lists it)");
            require_flat(*it->second, z.model_scan(i).path + " key '" + kFrozenPrefix + name + "'");
            fragments.push_back(it->second);
            lengths.push_back(numel(it->second->shape));
            files.push_back(z.model_scan(i).path);
        }
        const auto slices = fragment_slices(lengths, numel(shape), files, name);
        out.emplace(name, from_slices(z, name, shape, slices, fragments));
    }
    return out;
}


OutputTensor whole(Zero& z, const std::string& name, const TensorRef& t) {
    OutputTensor o;
    o.name = name;
    o.shape = t.shape;
    o.source_dtype = o.dtype = t.dtype;
    o.copies.push_back({static_cast<uint32_t>(z.mapping.sources.size()), Shape(t.shape.size(), 0),
                        Shape(t.shape.size(), 0), t.shape});
    z.mapping.sources.push_back(t);
    return o;
}

// Output order: rank 0's module state dict (the model's own order), then any parameter it lacks.
std::vector<std::string> output_order(const Zero& z) {
    std::vector<std::string> order;
    std::set<std::string> seen;
    const std::string prefix = kModulePrefix;
    for (const auto& e : z.model_scan(0).tensors)
        if (e.key.starts_with(prefix) && seen.insert(e.key.substr(prefix.size())).second) order.push_back(e.key.substr(prefix.size()));
    auto add = [&](const NamedShapes& shapes) {
        for (const auto& [name, _] : shapes)
            if (seen.insert(name).second) order.push_back(name);
    };
    for (const auto& g : z.model.param_shapes) add(g);
    if (z.model.frozen_param_shapes) add(*z.model.frozen_param_shapes);
    return order;
}

void assemble(Zero& z, std::vector<std::string>& notes) {
    if (z.model.frozen_param_shapes)
        for (const auto& [name, _] : *z.model.frozen_param_shapes) z.frozen_names.insert(name);
    std::map<std::string, OutputTensor> made = trainable(z);
    for (auto& [name, t] : frozen(z)) made.emplace(name, std::move(t));
    const std::set<std::string> buffers(z.model.buffer_names.begin(), z.model.buffer_names.end());
    const std::map<std::string, std::string> aliases(z.model.shared_params.begin(), z.model.shared_params.end());
    size_t from_module = 0;
    const std::vector<std::string> order = output_order(z);
    for (const auto& name : order) {
        if (made.count(name) || aliases.count(name)) continue;
        const auto it = z.module[0].find(name);
        const bool full = it != z.module[0].end() && numel(it->second->shape) > 0;
        if (it != z.module[0].end() && buffers.count(name)) {
            made.emplace(name, whole(z, name, *it->second));
        } else if (full && z.stage <= 2) {
            // ZeRO-1 saves no frozen fragments: a frozen parameter is only in the module, in full.
            made.emplace(name, whole(z, name, *it->second));
            z.frozen_names.insert(name);
            ++from_module;
        } else {
            throw Error(z.model_scan(0).path + ": module key '" + name +
                        "' is in none of param_shapes, frozen_param_shapes, buffer_names and shared_params");
        }
    }
    for (const auto& name : order) {
        if (auto it = made.find(name); it != made.end()) {
            z.mapping.tensors.push_back(std::move(it->second));
            made.erase(it);
            continue;
        }
        const auto alias = aliases.find(name);
        const auto source = std::find_if(z.mapping.tensors.begin(), z.mapping.tensors.end(),
                                         [&](const OutputTensor& t) { return alias != aliases.end() && t.name == alias->second; });
        if (source == z.mapping.tensors.end())
            throw Error(z.model_scan(0).path + ": shared_params maps '" + name + "' to '" +
                        (alias == aliases.end() ? std::string("?") : alias->second) + "', which holds no data");
        OutputTensor copy = *source;
        copy.name = name;
        z.mapping.tensors.push_back(std::move(copy));
    }
    if (from_module)
        notes.push_back(std::to_string(from_module) + " frozen parameters taken from the module's " +
                        "training copy (ZeRO-" + std::to_string(z.stage) + " saves no frozen fp32 fragments)");
}

// A PEFT adapter's own tensors (LoRA factors, modules_to_save copies) are exported in the dtype the
// engine's module held them in (bf16 under "bf16", fp32 without mixed precision), as
// PeftModel.save_pretrained of that module (HF Trainer's save_model) writes them; the fp32 master
// is still what is read (the bit16 copy is the master rounded with round-to-nearest-even, which is
// how the output cast rounds too). Folds read the masters at full precision.
void keep_adapter_module_dtype(Zero& z) {
    for (OutputTensor& t : z.mapping.tensors) {
        const auto it = z.module[0].find(t.name);
        if (is_peft_adapter_tensor(t.name) && it != z.module[0].end() && is_floating(it->second->dtype))
            t.dtype = it->second->dtype;
    }
}

// zero_to_fp32.py's --exclude_frozen_parameters: the frozen parameters (and names shared_params
// maps to one) are left out, each source dropped with the flag as its reason.
void exclude_frozen(Zero& z, SourceLedger& ledger, std::set<std::string>& left_out, std::vector<std::string>& notes) {
    const std::map<std::string, std::string> aliases(z.model.shared_params.begin(), z.model.shared_params.end());
    auto frozen = [&](const std::string& name) {
        const auto alias = aliases.find(name);
        return z.frozen_names.count(name) || (alias != aliases.end() && z.frozen_names.count(alias->second));
    };
    size_t excluded = 0;
    std::vector<OutputTensor> kept;
    for (auto& t : z.mapping.tensors) {
        if (!frozen(t.name)) {
            kept.push_back(std::move(t));
            continue;
        }
        ledger.drop_output(t, z.mapping.sources, DropReason::ExcludedFrozen);
        left_out.insert(t.name);
        ++excluded;
    }
    z.mapping.tensors = std::move(kept);
    notes.push_back("--exclude_frozen_parameters: " + std::to_string(excluded) + " frozen parameters left out");
}

// Everything not written: the module's bit16 copies (rank 0's; the other ranks' are replicas)
// and the optimizer state. Returns the optimizer-state bytes, which the merge never reads.
uint64_t drop_unwritten(const Zero& z, SourceLedger& ledger) {
    uint64_t skipped = 0;
    for (const TensorRef* flat : z.padding_flats) ledger.drop(*flat, DropReason::PartitionPadding);
    const std::string flat_prefix = z.stage == 3 ? kZero3FlatPrefix : kZero2FlatPrefix;
    for (size_t r = 0; r < z.world; ++r)
        for (const auto& e : z.optim_scan(r).tensors)
            if (!e.key.starts_with(flat_prefix)) {
                ledger.drop(e.tensor, DropReason::OutsideModel);
                skipped += e.tensor.nbytes();
            }
    for (size_t i = 0; i < z.c.model_files.size(); ++i)
        for (const auto& e : z.model_scan(i).tensors)
            ledger.drop(e.tensor, !e.key.starts_with(kModulePrefix) ? DropReason::OutsideModel
                                  : i == 0                          ? DropReason::TrainingCopy
                                                                    : DropReason::Replica);
    return skipped;
}

}  // namespace

bool is_peft_adapter_tensor(const std::string& name) {
    for (const char* part : {".lora_A.", ".lora_B.", ".lora_embedding_A.", ".lora_embedding_B.", ".modules_to_save."})
        if (name.find(part) != std::string::npos) return true;
    return false;
}

TensorMapping map_deepspeed(const DeepSpeedCheckpoint& c, const std::vector<ScannedFile>& scans, SourceLedger& ledger,
                            bool exclude_frozen_parameters, std::set<std::string>& left_out, nlohmann::ordered_json& facts,
                            std::vector<std::string>& notes) {
    if (scans.size() != c.optim_files.size() + c.model_files.size()) throw Error(c.tag_dir + ": scans and files disagree");
    Zero z(c, scans);
    read_stage_and_world(z);
    require_distinct_names(z);
    index_files(z);
    assemble(z, notes);
    keep_adapter_module_dtype(z);
    if (exclude_frozen_parameters) exclude_frozen(z, ledger, left_out, notes);
    // Before the rest is dropped as training copies, so a persistent rotary buffer keeps its own reason.
    drop_non_weight_buffers(z.mapping, ledger, notes);
    const uint64_t skipped = drop_unwritten(z, ledger);
    uint64_t masters = 0, padding = 0;
    for (const auto& g : z.model.param_shapes)
        for (const auto& [_, shape] : g) {
            masters += static_cast<uint64_t>(numel(shape)) * 4;
            if (z.stage == 3) padding += (z.world - numel(shape) % z.world) % z.world;
        }
    if (z.stage <= 2) {
        for (size_t r = 0; r < z.world; ++r)
            for (int64_t p : optim_facts(z.optim_scan(r)).group_paddings) padding += static_cast<uint64_t>(p);
        for (const auto& group : optim_facts(z.optim_scan(0)).param_alignment_paddings)  // once per flat, not per rank
            for (int64_t p : group) padding += static_cast<uint64_t>(p);
    }
    facts["tag"] = c.tag;
    facts["zero_stage"] = z.stage;
    facts["world_size"] = z.world;
    facts["flat_groups"] = z.model.param_shapes.size();
    facts["padding_elements"] = padding;
    facts["fp32_master_bytes"] = masters;
    facts["optimizer_state_bytes_skipped"] = skipped;
    facts["ds_version"] = z.model.ds_version;
    notes.push_back("ZeRO-" + std::to_string(z.stage) + ", tag " + c.tag + ", world size " + std::to_string(z.world) + ", " +
                    std::to_string(z.model.param_shapes.size()) + (z.stage == 3 ? " sub-groups" : " param groups") +
                    ", " + std::to_string(padding) + " padding elements; fp32 masters " + human_bytes(masters) +
                    " read, optimizer state " + human_bytes(skipped) + " never read");
    return std::move(z.mapping);
}

nlohmann::ordered_json deepspeed_groups(const DeepSpeedCheckpoint& c, const std::vector<ScannedFile>& scans) {
    nlohmann::ordered_json groups = nlohmann::ordered_json::object();
    if (scans.size() <= c.optim_files.size()) return groups;
    const ModelFacts model = model_facts(scans[c.optim_files.size()]);
    const bool zero3 = c.per_rank_model_files;
    for (size_t g = 0; g < model.param_shapes.size(); ++g) {
        int64_t elements = 0;
        nlohmann::ordered_json names = nlohmann::ordered_json::array();
        for (const auto& [name, shape] : model.param_shapes[g]) {
            names.push_back(name);
            elements += numel(shape);
        }
        groups[std::string(zero3 ? "ZeRO-3 sub-group " : "ZeRO-1/2 param group ") + std::to_string(g) + " (" +
               std::to_string(elements) + " fp32 elements over " + std::to_string(c.optim_files.size()) + " ranks)"] = names;
    }
    if (model.frozen_param_shapes && !model.frozen_param_shapes->empty()) {
        nlohmann::ordered_json names = nlohmann::ordered_json::array();
        for (const auto& [name, _] : *model.frozen_param_shapes) names.push_back(name);
        groups["frozen (bit16 fragments)"] = names;
    }
    return groups;
}

}  // namespace vmerge
