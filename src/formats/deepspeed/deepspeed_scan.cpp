#include "formats/deepspeed/deepspeed_scan.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pickle/pickle.h"
#include "torch/torch_pickle.h"
#include "zip/zip_archive.h"

namespace vmerge {
namespace {

using nlohmann::json;
using pickle::Kind;
using pickle::Value;

struct Reader {
    const ZipArchive& archive;
    const InputFile& file;
    std::string where;
    ScannedFile& out;

    // Every tensor under `v`, keyed by its path: containers and objects' BUILD state are
    // walked (the pickle is depth-bounded), everything else is data the merge does not need.
    void collect(const Value& v, const std::string& path) {
        TensorRef t;
        if (interpret_tensor(v, archive, file, t, where + " key '" + path + "'")) {
            out.tensors.push_back({path, std::move(t), 0});
            return;
        }
        const std::string dot = path.empty() ? "" : path + ".";
        if (v.kind == Kind::Dict) {
            for (const auto& [key, value] : v.entries) collect(*value, dot + key_text(*key));
        } else if (v.kind == Kind::List || v.kind == Kind::Tuple) {
            for (size_t i = 0; i < v.items.size(); ++i) collect(*v.items[i], dot + std::to_string(i));
        } else if (v.kind == Kind::Object) {
            if (v.args) collect(*v.args, path);
            if (v.state) collect(*v.state, path);
        }
    }

    static std::string key_text(const Value& key) {
        if (key.kind == Kind::String) return key.text;
        if (key.kind == Kind::Int) return std::to_string(key.integer);
        return pickle::describe(key);
    }
};

int64_t int_of(const Value& v, const std::string& where) {
    if (v.kind == Kind::Int) return v.integer;
    if (v.kind == Kind::Bool) return v.boolean;
    throw Error(where + ": expected an int, found " + pickle::describe(v));
}

// torch.Size((...)) or a plain tuple/list of ints, whose element count fits 64 bits.
Shape shape_of(const Value& v, const std::string& where) {
    const Shape shape = torch_size_of(v, where);
    if (!checked_numel(shape)) throw Error(where + ": shape " + shape_to_string(shape) + " overflows 64 bits");
    return shape;
}

json named_shapes_json(const Value& dict, const std::string& where) {
    if (dict.kind != Kind::Dict) throw Error(where + ": expected a dict of name -> torch.Size, found " + pickle::describe(dict));
    json out = json::array();
    for (const auto& [key, value] : dict.entries) {
        if (key->kind != Kind::String) throw Error(where + ": a parameter name is not a string");
        out.push_back(json::array({key->text, shape_of(*value, where + " '" + key->text + "'")}));
    }
    return out;
}

// ZeroStageEnum(2) (Python <= 3.10), getattr(ZeroStageEnum, 'gradients') (3.11+), or an int.
int zero_stage_of(const Value& v, const std::string& where) {
    if (v.kind == Kind::Int) return static_cast<int>(v.integer);
    if (v.kind == Kind::Object && v.args && v.args->kind == Kind::Tuple) {
        const auto& items = v.args->items;
        if (items.size() == 1 && items[0]->kind == Kind::Int) return static_cast<int>(items[0]->integer);
        if (items.size() == 2 && items[1]->kind == Kind::String) {
            const std::string& name = items[1]->text;
            const char* names[] = {"disabled", "optimizer_states", "gradients", "weights"};
            for (int s = 0; s < 4; ++s)
                if (name == names[s]) return s;
        }
    }
    throw Error(where + ": zero_stage is " + pickle::describe(v) + ", not a ZeRO stage");
}

std::vector<int64_t> ints_of(const Value& v, const std::string& where) {
    if (v.kind == Kind::List || v.kind == Kind::Tuple) {
        std::vector<int64_t> out;
        for (const auto& item : v.items) out.push_back(int_of(*item, where));
        return out;
    }
    return {int_of(v, where)};
}

json optim_metadata(const Value& top, const std::string& where) {
    json m = {{"file", "optim"}};
    const Value* osd = pickle::dict_get(top, "optimizer_state_dict");
    if (!osd || osd->kind != Kind::Dict) throw Error(where + ": no optimizer_state_dict (not a DeepSpeed optimizer file)");
    if (const Value* stage = pickle::dict_get(*osd, "zero_stage")) m["zero_stage"] = zero_stage_of(*stage, where);
    if (const Value* count = pickle::dict_get(*osd, "partition_count"))
        m["partition_count"] = ints_of(*count, where + " partition_count");
    if (const Value* paddings = pickle::dict_get(*osd, "group_paddings"))
        m["group_paddings"] = ints_of(*paddings, where + " group_paddings");
    if (const Value* aligned = pickle::dict_get(*osd, "param_alignment_paddings"); aligned && aligned->kind != Kind::None) {
        if (aligned->kind != Kind::List && aligned->kind != Kind::Tuple)
            throw Error(where + ": param_alignment_paddings is " + pickle::describe(*aligned) + ", not a list per group");
        m["param_alignment_paddings"] = json::array();
        for (const auto& group : aligned->items)
            m["param_alignment_paddings"].push_back(ints_of(*group, where + " param_alignment_paddings"));
    }
    return m;
}

// "'model.layers.0.mlp', 8 experts, ep_size 2, checkpoint_format 'zero3_partitioned'": what an
// AutoEP layer entry says about itself, for the refusal.
std::string autoep_entry_text(const Value& entry) {
    if (entry.kind != Kind::Dict) return pickle::describe(entry);
    std::string text;
    auto add = [&](const char* key, const std::string& label) {
        const Value* v = pickle::dict_get(entry, key);
        if (!v) return;
        const std::string value = v->kind == Kind::String ? "'" + v->text + "'"
                                  : v->kind == Kind::Int  ? std::to_string(v->integer)
                                                          : pickle::describe(*v);
        text += (text.empty() ? "" : ", ") + label + value;
    };
    add("module_path", "");
    add("num_experts", "num_experts ");
    add("ep_size", "ep_size ");
    add("checkpoint_format", "checkpoint_format ");
    return text.empty() ? pickle::describe(entry) : text;
}

// DeepSpeed's AutoEP (engine.py, zero_to_fp32.py): experts partitioned over expert-parallel
// groups, their layout described by `ds_autoep_layers` (older: `autoep_layers`); the ZeRO
// partitions alone do not say where an expert's elements are. None or [] is a plain save.
void refuse_autoep(const Value& top, const std::string& where) {
    for (const char* key : {"ds_autoep_layers", "autoep_layers"}) {
        const Value* layers = pickle::dict_get(top, key);
        if (!layers || layers->kind == Kind::None) continue;
        if ((layers->kind == Kind::List || layers->kind == Kind::Tuple) && layers->items.empty()) continue;
        std::string found = pickle::describe(*layers);
        if (layers->kind == Kind::List || layers->kind == Kind::Tuple)
            found = std::to_string(layers->items.size()) + " AutoEP MoE layer" + (layers->items.size() == 1 ? "" : "s") +
                    " (first: " + autoep_entry_text(*layers->items[0]) + ")";
        throw Error(where + ": " + key + " holds " + found +
                    ": a DeepSpeed AutoEP (expert-parallel) checkpoint, which is not supported (its experts are "
                    "partitioned over expert-parallel groups; DeepSpeed converts it with ds_to_universal.py)");
    }
}

json model_metadata(const Value& top, const std::string& where) {
    refuse_autoep(top, where);
    json m = {{"file", "model"}};
    const Value* shapes = pickle::dict_get(top, "param_shapes");
    if (!shapes || (shapes->kind != Kind::List && shapes->kind != Kind::Tuple))
        throw Error(where + ": no param_shapes list (not a DeepSpeed ZeRO model-states file)");
    m["param_shapes"] = json::array();
    for (size_t g = 0; g < shapes->items.size(); ++g)
        m["param_shapes"].push_back(named_shapes_json(*shapes->items[g], where + " param_shapes[" + std::to_string(g) + "]"));
    if (const Value* frozen = pickle::dict_get(top, "frozen_param_shapes"); frozen && frozen->kind != Kind::None)
        m["frozen_param_shapes"] = named_shapes_json(*frozen, where + " frozen_param_shapes");
    m["shared_params"] = json::array();
    if (const Value* shared = pickle::dict_get(top, "shared_params"); shared && shared->kind == Kind::Dict)
        for (const auto& [alias, source] : shared->entries)
            if (alias->kind == Kind::String && source->kind == Kind::String)
                m["shared_params"].push_back(json::array({alias->text, source->text}));
    m["buffer_names"] = json::array();
    if (const Value* buffers = pickle::dict_get(top, "buffer_names"); buffers && buffers->kind == Kind::List)
        for (const auto& b : buffers->items)
            if (b->kind == Kind::String) m["buffer_names"].push_back(b->text);
    if (const Value* dp = pickle::dict_get(top, "dp_world_size"); dp && dp->kind == Kind::Int) m["dp_world_size"] = dp->integer;
    if (const Value* v = pickle::dict_get(top, "ds_version"); v && v->kind == Kind::String) m["ds_version"] = v->text;
    const Value* config = pickle::dict_get(top, "ds_config");
    const Value* zero = config ? pickle::dict_get(*config, "zero_optimization") : nullptr;
    const Value* offload = zero ? pickle::dict_get(*zero, "offload_optimizer") : nullptr;
    const Value* device = offload ? pickle::dict_get(*offload, "device") : nullptr;
    if (device && device->kind == Kind::String) m["optimizer_offload"] = device->text;
    return m;
}

NamedShapes named_shapes_from(const json& j) {
    NamedShapes out;
    for (const auto& e : j) out.emplace_back(e.at(0).get<std::string>(), e.at(1).get<Shape>());
    return out;
}

json metadata_of(const ScannedFile& scan) {
    if (scan.metadata.empty()) throw Error(scan.path + ": not scanned as a DeepSpeed rank file");
    return json::parse(scan.metadata);
}

}  // namespace

ScannedFile scan_deepspeed_file(const InputFile& file) {
    ZipArchive archive = ZipArchive::open(file);
    const std::string where = file.path() + ":data.pkl";
    pickle::ValuePtr root = pickle::load(archive.read(file, archive.get("data.pkl")), where);
    if (root->kind != Kind::Dict) throw Error(where + ": expected a dict, found " + pickle::describe(*root));
    ScannedFile scanned;
    scanned.path = file.path();
    const bool optim = file.path().ends_with("_optim_states.pt");
    scanned.metadata = (optim ? optim_metadata(*root, where) : model_metadata(*root, where)).dump();
    Reader{archive, file, where, scanned}.collect(*root, "");
    return scanned;
}

OptimFacts optim_facts(const ScannedFile& scan) {
    const json m = metadata_of(scan);
    OptimFacts f;
    if (m.contains("zero_stage")) f.zero_stage = m["zero_stage"].get<int>();
    if (m.contains("partition_count")) f.partition_count = m["partition_count"].get<std::vector<int64_t>>();
    if (m.contains("group_paddings")) f.group_paddings = m["group_paddings"].get<std::vector<int64_t>>();
    if (m.contains("param_alignment_paddings"))
        f.param_alignment_paddings = m["param_alignment_paddings"].get<std::vector<std::vector<int64_t>>>();
    return f;
}

ModelFacts model_facts(const ScannedFile& scan) {
    const json m = metadata_of(scan);
    ModelFacts f;
    for (const auto& g : m.at("param_shapes")) f.param_shapes.push_back(named_shapes_from(g));
    if (m.contains("frozen_param_shapes")) f.frozen_param_shapes = named_shapes_from(m["frozen_param_shapes"]);
    for (const auto& s : m.at("shared_params")) f.shared_params.emplace_back(s.at(0).get<std::string>(), s.at(1).get<std::string>());
    f.buffer_names = m.at("buffer_names").get<std::vector<std::string>>();
    if (m.contains("dp_world_size")) f.dp_world_size = m["dp_world_size"].get<int64_t>();
    f.ds_version = m.value("ds_version", "");
    f.optimizer_offload = m.value("optimizer_offload", "");
    return f;
}

}  // namespace vmerge
