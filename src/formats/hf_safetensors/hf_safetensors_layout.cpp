// Hugging Face safetensors already in the checkpoint's huggingface/ folder (verl >= 0.7 with
// mbridge): copied and checked, nothing to merge. Grouped under --backend megatron.
#include "formats/hf_safetensors/hf_safetensors_layout.h"

#include <filesystem>

#include "core/box_region.h"
#include "formats/backend.h"
#include "formats/hf_safetensors/quantized_sources.h"
#include "io/input_tree.h"
#include "safetensors/safetensors_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

bool holds_safetensors(const fs::path& dir) {
    for (const auto& entry : list_input_folder(dir.string()))
        if (!entry.is_folder && entry.name.ends_with(".safetensors")) return true;
    return false;
}

class HfSafetensorsBackend final : public Backend {
public:
    std::string name() const override { return "hf_safetensors"; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const std::string folder = fs::path(request.default_hf_dir).filename().string() + "/";
        if (!holds_safetensors(request.default_hf_dir)) return {false, "no *.safetensors in " + folder};
        d.weights_dir = request.default_hf_dir;
        d.description = "Hugging Face safetensors already in " + request.default_hf_dir;
        d.notes.push_back(request.default_hf_dir + " already holds safetensors weights (verl >= 0.7 saves them with "
                          "mbridge): they are copied and checked, nothing needs merging");
        return {true, "*.safetensors in " + folder};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>&, const HfConfig&, const MapOptions&,
             MappedCheckpoint& m, SourceLedger&) const override {
        m.mapping = map_hf_safetensors(d.weights_dir, &m.notes);
    }
};

}  // namespace

namespace {

// Every tensor of `file` copied whole.
void add_file(TensorMapping& mapping, const SafetensorsFile& file) {
    for (const auto& e : file.entries) {
        TensorRef ref;
        ref.dtype = e.dtype;
        ref.shape = e.shape;
        ref.stride = contiguous_strides(e.shape);
        ref.storage = {file.path, e.name, e.begin, e.end - e.begin, std::nullopt};  // safetensors: no CRC
        OutputTensor t;
        t.name = e.name;
        t.source_dtype = t.dtype = e.dtype;
        t.shape = e.shape;
        const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
        mapping.sources.push_back(ref);
        add_copy(t, source, Shape(e.shape.size(), 0), Shape(e.shape.size(), 0), e.shape);
        mapping.tensors.push_back(std::move(t));
    }
}

}  // namespace

TensorMapping map_hf_safetensors(const std::string& dir, std::vector<std::string>* notes) {
    TensorMapping mapping;
    for (const auto& file : read_hf_weights(dir).files) add_file(mapping, file);
    const std::string note = attach_source_scales(mapping, read_source_quantization(dir));
    if (notes && !note.empty()) notes->push_back(note);
    return mapping;
}

void put_lora_base_first(TensorMapping& adapter, const std::string& base_dir) {
    TensorMapping merged = map_hf_safetensors(base_dir);
    append_mapping(merged, adapter);
    adapter = std::move(merged);
}

TensorMapping map_safetensors_file(const std::string& path) {
    TensorMapping mapping;
    add_file(mapping, read_safetensors_header(path));
    return mapping;
}

const Backend& hf_safetensors_backend() {
    static const HfSafetensorsBackend backend;
    return backend;
}

}  // namespace vmerge
