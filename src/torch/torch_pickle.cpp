#include "torch/torch_pickle.h"

#include <algorithm>
#include <cstdint>

#include "torch/dtensor_placement.h"
#include "torch/torchao_float8.h"
#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {
namespace {

using pickle::Kind;
using pickle::Value;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw Error(where + ": " + what);
}

bool is_torch_distributed_class(const Value* cls, std::string_view name) {
    return cls && cls->kind == Kind::Global && cls->name == name &&
           cls->module.starts_with("torch.distributed");
}

int64_t as_int(const Value& v, const std::string& where, const char* what) {
    if (v.kind == Kind::Int) return v.integer;
    if (v.kind == Kind::Bool) return v.boolean ? 1 : 0;
    fail(where, std::string("expected an int for ") + what + ", found " + pickle::describe(v));
}

// A shape: a plain tuple/list of ints, or torch.Size((...)).
Shape as_shape(const Value& v, const std::string& where, const char* what) {
    const Value* tuple = &v;
    if (v.kind == Kind::Object && pickle::is_global(*v.callable, "torch", "Size")) {
        if (!v.args || v.args->kind != Kind::Tuple || v.args->items.size() != 1)
            fail(where, std::string("malformed torch.Size for ") + what);
        tuple = v.args->items[0].get();
    }
    if (tuple->kind != Kind::Tuple && tuple->kind != Kind::List)
        fail(where, std::string("expected a tuple for ") + what + ", found " + pickle::describe(v));
    Shape shape;
    for (const auto& item : tuple->items) {
        int64_t d = as_int(*item, where, what);
        if (d < 0)
            fail(where, std::string(what) + " has a negative value " + std::to_string(d) +
                            " at index " + std::to_string(shape.size()));
        shape.push_back(d);
    }
    return shape;
}

DType dtype_of_global(const Value& v, const std::string& where) {
    if (v.kind != Kind::Global || v.module != "torch")
        fail(where, "expected a torch dtype, found " + pickle::describe(v));
    auto dtype = dtype_from_torch_name(v.name);
    if (!dtype) fail(where, "unsupported tensor dtype torch." + v.name);
    return *dtype;
}

// ('storage', <storage class>, key, location, numel) -> the record's bytes in the file.
StorageRef resolve_storage(const Value& pid, const ZipArchive& archive, const InputFile& file,
                           DType* legacy_dtype, const std::string& where) {
    if (pid.kind != Kind::PersistentId || !pid.args || pid.args->kind != Kind::Tuple ||
        pid.args->items.size() < 5)
        fail(where, "expected a storage persistent id ('storage', type, key, location, numel)");
    const auto& items = pid.args->items;
    if (items[0]->kind != Kind::String || items[0]->text != "storage")
        fail(where, "persistent id is not a storage: " + pickle::describe(*items[0]));
    const Value& type = *items[1];
    // torch.save names an untyped storage torch.storage.UntypedStorage when it pickles it from a
    // tensor subclass's state (torchao's Float8Tensor qdata), torch.UntypedStorage otherwise.
    const bool untyped_by_module = type.kind == Kind::Global && type.module == "torch.storage" && type.name == "UntypedStorage";
    if (type.kind != Kind::Global || (type.module != "torch" && !untyped_by_module))
        fail(where, "unknown storage type " + pickle::describe(type));
    if (items[2]->kind != Kind::String) fail(where, "storage key is not a string");
    if (type.name == "UntypedStorage") {
        *legacy_dtype = DType::U8;
    } else {
        auto dtype = dtype_from_storage_class(type.name);
        if (!dtype) fail(where, "unsupported storage type torch." + type.name);
        *legacy_dtype = *dtype;
    }
    int64_t count = as_int(*items[4], where, "storage numel");
    const std::string record_name = "data/" + items[2]->text;
    const ZipRecord& record = archive.get(record_name);
    if (count < 0) fail(where, "storage " + record_name + " has a negative numel");
    uint64_t expected = 0;
    const bool overflows = __builtin_mul_overflow(static_cast<uint64_t>(count),
                                                  element_size(*legacy_dtype), &expected);
    if (overflows || record.size < expected)
        fail(where, "storage record " + record_name + " holds " + std::to_string(record.size) +
                        " bytes, but the pickle declares " + std::to_string(count) +
                        " elements of torch." + type.name + " (" +
                        (overflows ? std::string("more than 2^64") : std::to_string(expected)) +
                        " bytes)");
    return StorageRef{file.path(), record_name, record.data_offset, record.size, record.crc32};
}

void check_view_fits(const TensorRef& t, const std::string& where) {
    if (t.shape.size() != t.stride.size()) fail(where, "size and stride have different ranks");
    if (t.storage_offset < 0) fail(where, "negative storage offset");
    const std::string view = "tensor " + shape_to_string(t.shape) + " with stride " +
                             shape_to_string(t.stride) + " at offset " +
                             std::to_string(t.storage_offset);
    // Sizes and strides are >= 0 (as_shape); every product and sum below is checked, so a
    // huge size or stride cannot wrap around into a small, "fitting" extent.
    const auto count = checked_numel(t.shape);
    if (!count) fail(where, view + ": its element count overflows 64 bits");
    if (*count == 0) return;
    uint64_t last = static_cast<uint64_t>(t.storage_offset);
    for (size_t i = 0; i < t.shape.size(); ++i) {
        uint64_t reach = 0;
        if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1),
                                   static_cast<uint64_t>(t.stride[i]), &reach) ||
            __builtin_add_overflow(last, reach, &last))
            fail(where, view + ": its extent overflows 64 bits");
    }
    uint64_t end_byte = 0;
    if (__builtin_add_overflow(last, uint64_t{1}, &end_byte) ||
        __builtin_mul_overflow(end_byte, element_size(t.dtype), &end_byte) ||
        last > static_cast<uint64_t>(INT64_MAX))
        fail(where, view + ": its extent overflows 64 bits");
    if (end_byte > t.storage.byte_size)
        fail(where, view + " reaches byte " + std::to_string(end_byte) + " of a " +
                        std::to_string(t.storage.byte_size) + "-byte storage " + t.storage.key);
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
// _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
TensorRef rebuild_dense(const Value& args, bool v3, const ZipArchive& archive,
                        const InputFile& file, const std::string& where) {
    if (args.kind != Kind::Tuple || args.items.size() < (v3 ? 7u : 4u))
        fail(where, "malformed tensor rebuild arguments");
    TensorRef t;
    DType storage_dtype;
    t.storage = resolve_storage(*args.items[0], archive, file, &storage_dtype, where);
    t.dtype = v3 ? dtype_of_global(*args.items[6], where) : storage_dtype;
    t.storage_offset = as_int(*args.items[1], where, "storage offset");
    t.shape = as_shape(*args.items[2], where, "size");
    t.stride = as_shape(*args.items[3], where, "stride");
    check_view_fits(t, where);
    return t;
}

std::vector<Placement> parse_placements(const Value& v, const std::string& where) {
    if (v.kind != Kind::Tuple && v.kind != Kind::List) fail(where, "placements are not a tuple");
    std::vector<Placement> out;
    for (const auto& item : v.items) {
        const Value* cls = pickle::object_class(*item);
        if (!cls) fail(where, "placement is not an object: " + pickle::describe(*item));
        Placement p;
        const Value* state = item->state.get();
        auto field = [&](const char* name) -> const Value* {
            return state ? pickle::dict_get(*state, name) : nullptr;
        };
        if (cls->name == "Shard" || cls->name == "_StridedShard") {
            p.kind = cls->name == "Shard" ? Placement::Kind::Shard : Placement::Kind::StridedShard;
            const Value* dim = field("dim");
            if (!dim) fail(where, cls->name + " placement without a dim");
            p.dim = as_int(*dim, where, "placement dim");
            if (p.kind == Placement::Kind::StridedShard) {
                const Value* sf = field("split_factor");
                if (!sf) fail(where, "_StridedShard without a split_factor");
                p.split_factor = as_int(*sf, where, "split_factor");
                if (p.split_factor < 1) fail(where, "_StridedShard split_factor < 1");
            }
        } else if (cls->name == "Replicate") {
            p.kind = Placement::Kind::Replicate;
        } else if (cls->name == "Partial" || cls->name == "_Partial") {
            p.kind = Placement::Kind::Partial;
            const Value* op = field("reduce_op");
            p.reduce_op = op && op->kind == Kind::String ? op->text : "sum";
        } else {
            fail(where, "unknown DTensor placement " + cls->module + "." + cls->name);
        }
        out.push_back(p);
    }
    return out;
}

// The mesh shape a DeviceMesh `_layout` (torch.distributed._mesh_layout._MeshLayout) holds:
// torch 2.10-2.12 pickle its `shape` tuple; 2.13 pickles `axes`, one _FlatLayout per mesh
// dimension, whose size is the product of its flattened `shape` (empty for a size-1 dim).
Shape mesh_layout_shape(const Value& layout_obj, const std::string& where) {
    const Value* state = layout_obj.state.get();
    if (const Value* shape = state ? pickle::dict_get(*state, "shape") : nullptr)
        return as_shape(*shape, where, "mesh shape");
    const Value* axes = state ? pickle::dict_get(*state, "axes") : nullptr;
    if (!axes || (axes->kind != Kind::Tuple && axes->kind != Kind::List))
        fail(where, "DeviceMesh _layout with neither `shape` nor `axes`; cannot tell its shape");
    Shape sizes;
    for (const auto& axis : axes->items) {
        const Value* axis_shape = axis->state ? pickle::dict_get(*axis->state, "shape") : nullptr;
        if (!axis_shape) fail(where, "DeviceMesh _layout axis without a shape");
        int64_t size = 1;
        if (axis_shape->kind == Kind::Int) {
            size = as_int(*axis_shape, where, "mesh axis size");
        } else {
            for (const int64_t part : as_shape(*axis_shape, where, "mesh axis shape")) {
                if (part < 1 || part > kMaxWorldSize || size > kMaxWorldSize / part)
                    fail(where, "DeviceMesh _layout axis of more than " + std::to_string(kMaxWorldSize) + " ranks");
                size *= part;
            }
        }
        sizes.push_back(size);
    }
    return sizes;
}

// DeviceMesh state varies by torch version (docs/reference/torch-formats.md §2.3): the mesh shape
// is the `mesh` tensor's shape (<= 2.9) or its `_layout` (2.10+).
void parse_mesh(const Value& mesh, DTensorLayout& layout, const ZipArchive& archive,
                const InputFile& file, const std::string& where) {
    const Value* state = mesh.state.get();
    if (!state || state->kind != Kind::Dict) fail(where, "DeviceMesh without state");
    if (const Value* layout_obj = pickle::dict_get(*state, "_layout")) {
        layout.mesh_shape = mesh_layout_shape(*layout_obj, where);
    } else if (const Value* mesh_tensor = pickle::dict_get(*state, "mesh")) {
        TensorRef t;
        if (!interpret_tensor(*mesh_tensor, archive, file, t, where + " (DeviceMesh.mesh)"))
            fail(where, "DeviceMesh.mesh is not a tensor");
        layout.mesh_shape = t.shape;
    } else {
        fail(where, "DeviceMesh has neither `mesh` nor `_layout`; cannot tell its shape");
    }
    const Value* coords = pickle::dict_get(*state, "_coordinate_on_dim");
    if (!coords || coords->kind == Kind::None)
        fail(where, "DeviceMesh without _coordinate_on_dim (the saving rank is not in the mesh)");
    layout.coordinates = as_shape(*coords, where, "mesh coordinates");
    const Value* names = pickle::dict_get(*state, "_mesh_dim_names");
    if (!names) names = pickle::dict_get(*state, "mesh_dim_names");
    if (names && (names->kind == Kind::Tuple || names->kind == Kind::List))
        for (const auto& n : names->items)
            layout.mesh_dim_names.push_back(n->kind == Kind::String ? n->text : "?");
}

void interpret_dtensor(const Value& wrapper_args, const Value& state, const ZipArchive& archive,
                       const InputFile& file, TensorRef& out, const std::string& where) {
    // state: (None | dict, {'_local_tensor': t, '_spec': spec}) on Python >= 3.11, or the
    // slots dict alone.
    const Value* slots = &state;
    if (state.kind == Kind::Tuple && state.items.size() == 2) slots = state.items[1].get();
    const Value* local = pickle::dict_get(*slots, "_local_tensor");
    const Value* spec = pickle::dict_get(*slots, "_spec");
    if (!local || !spec) fail(where, "DTensor without _local_tensor/_spec");
    if (!interpret_tensor(*local, archive, file, out, where + " (_local_tensor)"))
        fail(where, "DTensor _local_tensor is not a tensor");
    if (out.dtensor) fail(where, "nested DTensor");
    const Value* spec_state = spec->state.get();
    if (!spec_state) fail(where, "DTensorSpec without state");
    const Value* mesh = pickle::dict_get(*spec_state, "mesh");
    const Value* placements = pickle::dict_get(*spec_state, "placements");
    if (!mesh || !placements) fail(where, "DTensorSpec without mesh/placements");
    DTensorLayout layout;
    parse_mesh(*mesh, layout, archive, file, where);
    layout.placements = parse_placements(*placements, where);
    // Global shape: the wrapper's size argument (cls, dtype, size, stride, ...).
    if (wrapper_args.kind == Kind::Tuple && wrapper_args.items.size() >= 3)
        layout.global_shape = as_shape(*wrapper_args.items[2], where, "DTensor size");
    else if (const Value* meta = pickle::dict_get(*spec_state, "tensor_meta");
             meta && meta->args && meta->args->kind == Kind::Tuple && !meta->args->items.empty())
        layout.global_shape = as_shape(*meta->args->items[0], where, "TensorMeta shape");
    else
        fail(where, "DTensor without a global shape");
    if (layout.placements.size() != layout.mesh_shape.size() ||
        layout.coordinates.size() != layout.mesh_shape.size())
        fail(where, "DTensor mesh has " + std::to_string(layout.mesh_shape.size()) +
                        " dims but " + std::to_string(layout.placements.size()) +
                        " placements and " + std::to_string(layout.coordinates.size()) +
                        " coordinates");
    check_dtensor_layout(layout, where);
    if (!checked_numel(layout.global_shape))
        fail(where, "DTensor global shape " + shape_to_string(layout.global_shape) + ": its element count overflows 64 bits");
    if (layout.global_shape.size() != out.shape.size())
        fail(where, "DTensor global shape " + shape_to_string(layout.global_shape) +
                        " and local shape " + shape_to_string(out.shape) + " differ in rank");
    out.dtensor = std::move(layout);
}

}  // namespace

bool interpret_tensor(const Value& value, const ZipArchive& archive, const InputFile& file,
                      TensorRef& out, const std::string& where) {
    if (value.kind != Kind::Object || !value.callable) return false;
    const Value& fn = *value.callable;
    if (fn.kind != Kind::Global) return false;
    const Value* args = value.args.get();
    if (fn.module == "torch._utils" && (fn.name == "_rebuild_tensor_v2" ||
                                        fn.name == "_rebuild_tensor_v3")) {
        out = rebuild_dense(*args, fn.name == "_rebuild_tensor_v3", archive, file, where);
        return true;
    }
    if (fn.module == "torch._utils" &&
        (fn.name == "_rebuild_parameter" || fn.name == "_rebuild_parameter_with_state")) {
        if (!args || args->kind != Kind::Tuple || args->items.empty())
            fail(where, "malformed Parameter rebuild");
        return interpret_tensor(*args->items[0], archive, file, out, where);
    }
    if (fn.module == "torch._tensor" && fn.name == "_rebuild_from_type_v2") {
        // (func, cls, args, state)
        if (!args || args->kind != Kind::Tuple || args->items.size() < 4)
            fail(where, "malformed _rebuild_from_type_v2");
        const Value& func = *args->items[0];
        const Value& cls = *args->items[1];
        if (pickle::is_global(func, "torch._utils", "_rebuild_wrapper_subclass")) {
            // torchao float8 training's marker around the stored high-precision weight.
            if (const Value* master = float8_cast_master_tensor(cls, *args->items[3], where))
                return interpret_tensor(*master, archive, file, out, where + " (_tensor)");
            if (!is_torch_distributed_class(&cls, "DTensor")) unsupported_tensor_subclass(cls, where);
            interpret_dtensor(*args->items[2], *args->items[3], archive, file, out, where);
            return true;
        }
        // A Parameter-like subclass around an ordinary rebuild: func(*args).
        Value call;
        call.kind = Kind::Object;
        call.callable = args->items[0];
        call.args = args->items[2];
        return interpret_tensor(call, archive, file, out, where);
    }
    refuse_transformer_engine_tensor(value, where);
    return false;
}

ScannedFile scan_torch_archive(const InputFile& file, uint64_t base, uint64_t length) {
    ZipArchive archive = ZipArchive::open(file, base, length);
    if (const ZipRecord* order = archive.find("byteorder")) {
        if (archive.read(file, *order) != "little")
            throw Error(file.path() + ": byteorder record is not 'little'; big-endian "
                                      "checkpoints are not supported");
    }
    const std::string where = file.path() + ":data.pkl";
    pickle::ValuePtr root = pickle::load(archive.read(file, archive.get("data.pkl")), where);
    ScannedFile scanned;
    scanned.path = file.path();
    const Value* top = root.get();
    // A bare tensor (a DCP item), a state dict, or a container of model chunks: verl's
    // Megatron model.pt is a list of state dicts, Megatron-LM's file has model / model0..N.
    if (scan_torchao_float8_item(*top, archive, file, where, scanned)) return scanned;
    TensorRef single;
    if (interpret_tensor(*top, archive, file, single, where)) {
        scanned.tensors.push_back({"", std::move(single), 0});
        return scanned;
    }
    std::vector<const Value*> chunks;
    if (top->kind == Kind::List) {
        for (const auto& item : top->items) chunks.push_back(item.get());
    } else if (top->kind == Kind::Dict) {
        if (pickle::dict_get(*top, "model0")) {
            for (int v = 0;; ++v) {
                const Value* chunk = pickle::dict_get(*top, "model" + std::to_string(v));
                if (!chunk) break;
                chunks.push_back(chunk);
            }
        } else {
            chunks.push_back(top);
            for (const char* nest : {"model", "state_dict", "module", "adapter_state_dict"}) {
                const Value* inner = pickle::dict_get(*top, nest);
                if (inner && inner->kind == Kind::Dict) {
                    chunks.back() = inner;
                    break;
                }
            }
        }
    }
    if (chunks.empty())
        throw Error(where + ": expected a state dict, found " + pickle::describe(*top));
    scanned.chunks = static_cast<int>(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
        const Value* dict = chunks[c];
        if (dict->kind != Kind::Dict)
            throw Error(where + ": model chunk " + std::to_string(c) + " is not a state dict but " +
                        pickle::describe(*dict));
        for (const auto& [key, value] : dict->entries) {
            if (key->kind != Kind::String)
                throw Error(where + ": state dict key is not a string: " + pickle::describe(*key));
            TensorRef t;
            if (interpret_tensor(*value, archive, file, t, where + " key '" + key->text + "'"))
                scanned.tensors.push_back({key->text, std::move(t), static_cast<int>(c)});
            else
                scanned.skipped.push_back({key->text, pickle::describe(*value)});
        }
    }
    return scanned;
}

Shape torch_size_of(const Value& v, const std::string& where) {
    const Value* tuple = &v;
    if (v.kind == Kind::Object && v.callable && pickle::is_global(*v.callable, "torch", "Size") && v.args &&
        v.args->kind == Kind::Tuple && v.args->items.size() == 1)
        tuple = v.args->items[0].get();
    if (tuple->kind != Kind::Tuple && tuple->kind != Kind::List)
        throw Error(where + ": expected a torch.Size, found " + pickle::describe(v));
    Shape out;
    for (const auto& d : tuple->items) {
        if (d->kind != Kind::Int || d->integer < 0) throw Error(where + ": bad size element " + pickle::describe(*d));
        out.push_back(d->integer);
    }
    return out;
}


}  // namespace vmerge
