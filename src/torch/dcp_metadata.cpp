#include "torch/dcp_metadata.h"

#include <filesystem>
#include <map>

#include "io/contained_path.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"
#include "io/input_file.h"
#include "io/read_once.h"
#include "pickle/pickle.h"
#include "torch/torch_pickle.h"

namespace vmerge {
namespace {

using pickle::Kind;
using pickle::Value;

const Value& field(const Value& object, const char* name, const std::string& where) {
    const Value* state = object.state.get();
    const Value* v = state ? pickle::dict_get(*state, name) : nullptr;
    if (!v) throw Error(where + ": " + pickle::describe(object) + " has no field '" + name + "'");
    return *v;
}

std::string class_name(const Value& v) {
    const Value* cls = pickle::object_class(v);
    return cls ? cls->name : std::string();
}

// TensorProperties pickles its state as a tuple (dtype, layout, requires_grad, memory
// format, pin_memory); older ShardedTensor metadata used a dict with `dtype`.
DType properties_dtype(const Value& properties, const std::string& where) {
    const Value* state = properties.state.get();
    const Value* dtype = nullptr;
    if (state && state->kind == Kind::Tuple && !state->items.empty()) dtype = state->items[0].get();
    if (state && state->kind == Kind::Dict) dtype = pickle::dict_get(*state, "dtype");
    if (!dtype || dtype->kind != Kind::Global || dtype->module != "torch")
        throw Error(where + ": TensorProperties without a torch dtype");
    auto parsed = dtype_from_torch_name(dtype->name);
    if (!parsed) throw Error(where + ": unsupported dtype torch." + dtype->name);
    return *parsed;
}

// (fqn, chunk offsets) -> where the bytes are: the file, offset and length of each chunk.
using StorageLocations = std::map<std::pair<std::string, Shape>, DcpChunk>;

StorageLocations storage_locations(const Value& storage, const std::string& path, const std::string& dir) {
    StorageLocations where_stored;
    for (const auto& [index, info] : storage.entries) {
        const std::string where = path + " storage_data";
        const Value& fqn = field(*index, "fqn", where);
        if (fqn.kind != Kind::String) throw Error(where + ": MetadataIndex.fqn is not a string");
        const Value* offset = index->state ? pickle::dict_get(*index->state, "offset") : nullptr;
        Shape offsets;
        if (offset && offset->kind != Kind::None) offsets = torch_size_of(*offset, where + " '" + fqn.text + "'");
        const Value& relative = field(*info, "relative_path", where);
        const Value& start = field(*info, "offset", where);
        const Value& length = field(*info, "length", where);
        if (relative.kind != Kind::String || start.kind != Kind::Int || length.kind != Kind::Int ||
            start.integer < 0 || length.integer < 0)
            throw Error(where + " '" + fqn.text + "': malformed _StorageInfo");
        if (const Value* transforms = info->state ? pickle::dict_get(*info->state, "transform_descriptors") : nullptr;
            transforms && transforms->kind == Kind::List && !transforms->items.empty())
            throw Error(where + " '" + fqn.text + "': stored with stream transforms (e.g. zstd), not supported");
        if (relative.text.find('/') != std::string::npos)  // DCP writes every file beside .metadata
            throw Error(where + " '" + fqn.text + "': file name '" + relative.text + "' is not in the folder");
        DcpChunk chunk;
        chunk.file = path_inside(dir, relative.text, where + " '" + fqn.text + "'");
        chunk.offset = static_cast<uint64_t>(start.integer);
        chunk.length = static_cast<uint64_t>(length.integer);
        where_stored[{fqn.text, offsets}] = chunk;
    }

    return where_stored;
}

}  // namespace

DcpMetadata read_dcp_metadata(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string path = dir + "/.metadata";
    if (!path_exists(path)) throw Error(path + ": missing (not a torch.distributed.checkpoint folder)");
    const std::string bytes = read_once(path, [&] {
        InputFile file(path);
        if (file.size() > (1ull << 31)) throw Error(path + ": " + std::to_string(file.size()) + " bytes is too large for metadata");
        std::string text(file.size(), '\0');
        file.read_exact(0, text.data(), text.size(), "DCP metadata");
        return text;
    });
    pickle::Limits limits;
    limits.max_values = 1ull << 28;
    const pickle::ValuePtr root = pickle::load(bytes, path, limits);
    if (class_name(*root) != "Metadata" && class_name(*root) != "MCoreMetadata")
        throw Error(path + ": expected a DCP Metadata object, found " + pickle::describe(*root));
    const Value& state_dict = field(*root, "state_dict_metadata", path);
    const Value& storage = field(*root, "storage_data", path);
    if (state_dict.kind != Kind::Dict || storage.kind != Kind::Dict)
        throw Error(path + ": state_dict_metadata/storage_data are not dicts");

    const StorageLocations where_stored = storage_locations(storage, path, dir);

    DcpMetadata meta;
    meta.dir = dir;
    std::map<std::string, uint64_t> file_sizes;
    for (const auto& [key, value] : state_dict.entries) {
        if (key->kind != Kind::String) throw Error(path + ": state_dict_metadata key is not a string");
        const std::string where = path + " '" + key->text + "'";
        const std::string kind = class_name(*value);
        if (kind == "BytesStorageMetadata") {  // optimizer scalars, pickled objects: not merged
            meta.byte_items.push_back(key->text);
            continue;
        }
        if (kind != "TensorStorageMetadata") throw Error(where + ": unknown storage metadata " + pickle::describe(*value));
        DcpTensor tensor;
        tensor.fqn = key->text;
        tensor.dtype = properties_dtype(field(*value, "properties", where), where);
        tensor.size = torch_size_of(field(*value, "size", where), where);
        if (!checked_numel(tensor.size))
            throw Error(where + ": size " + shape_to_string(tensor.size) + " has more than 2^63 elements");
        const Value& chunks = field(*value, "chunks", where);
        if (chunks.kind != Kind::List) throw Error(where + ": chunks is not a list");
        for (const auto& c : chunks.items) {
            DcpChunk chunk;
            const Shape offsets = torch_size_of(field(*c, "offsets", where), where);
            const Shape sizes = torch_size_of(field(*c, "sizes", where), where);
            if (offsets.size() != tensor.size.size() || sizes.size() != tensor.size.size())
                throw Error(where + ": chunk rank differs from the tensor's");
            for (size_t d = 0; d < sizes.size(); ++d)
                if (offsets[d] > tensor.size[d] || sizes[d] > tensor.size[d] - offsets[d])
                    throw Error(where + ": chunk at " + shape_to_string(offsets) + " of " + shape_to_string(sizes) +
                                " lies outside " + shape_to_string(tensor.size));
            if (numel(sizes) == 0) continue;
            auto it = where_stored.find({tensor.fqn, offsets});
            if (it == where_stored.end())
                throw Error(where + ": chunk at " + shape_to_string(offsets) + " has no storage_data entry");
            chunk = it->second;
            chunk.offsets = offsets;
            chunk.sizes = sizes;
            auto size_it = file_sizes.find(chunk.file);
            if (size_it == file_sizes.end() && is_object_url(chunk.file)) {
                if (entry_kind(chunk.file) != EntryKind::file)
                    throw Error(chunk.file + ": missing data file of " + where + " (no such object)");
                size_it = file_sizes.emplace(chunk.file, InputFile(chunk.file).size()).first;
            }
            if (size_it == file_sizes.end()) {
                std::error_code ec;
                const auto size = fs::file_size(chunk.file, ec);
                std::error_code exists_ec;
                if (ec && fs::exists(chunk.file, exists_ec)) require_regular_file(chunk.file);  // a FIFO: say so
                if (ec) throw Error(chunk.file + ": missing data file of " + where + " (" + ec.message() + ")");
                size_it = file_sizes.emplace(chunk.file, size).first;
            }
            if (chunk.offset > size_it->second || chunk.length > size_it->second - chunk.offset)
                throw Error(chunk.file + ": chunk of " + where + " at bytes " + std::to_string(chunk.offset) + "+" +
                            std::to_string(chunk.length) + " runs past the end of the " +
                            std::to_string(size_it->second) + "-byte file");
            tensor.chunks.push_back(chunk);
        }
        meta.tensors.push_back(std::move(tensor));
    }
    return meta;
}

}  // namespace vmerge
