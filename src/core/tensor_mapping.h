#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// "These elements of that source tensor go to this box of this output tensor": the one
// operation every merge rule is expressed in (docs/design.md, step 3, "map").
struct BoxCopy {
    uint32_t source = 0;   // index into TensorMapping::sources
    Shape src_start;       // in the source tensor's own (local) coordinates
    Shape dst_start;       // in the output tensor
    Shape extent;
};

struct OutputTensor {
    std::string name;
    DType source_dtype = DType::F32;  // every source of one output shares it
    DType dtype = DType::F32;         // as written
    Shape shape;
    std::vector<BoxCopy> copies;
    // Elements no copy covers are zeros (a Megatron vocabulary shorter than config.json's).
    bool zero_fill = false;
    // Added to every value as it is written (a Megatron table rule's `add`: megatron-core keeps a
    // norm's gamma zero-centred, HF's plain norm holds it plus 1); the values pass through float32,
    // and a LoRA update is added after it (to the weight as HF holds it).
    double value_offset = 0;

    // Weight-only quantization (quantization.h): a Packed tensor's copies assemble the float
    // weight of `source_shape`; its rows are quantized (int words or FP8 codes) into itself and its Scale/ZeroPoint
    // tensors, which get no work of their own. A Constant tensor holds its bytes. A GlobalScale
    // tensor (NVFP4's weight_global_scale, one float) is written with row 0 of its weight.
    enum class Role { Plain, QuantPacked, QuantScale, QuantZeroPoint, QuantGlobalScale, Constant };
    Role role = Role::Plain;
    Shape source_shape;              // Packed: the float weight's [out, in]
    size_t scale_tensor = 0;         // Packed: index of its Scale tensor
    std::optional<size_t> zero_point_tensor;  // Packed, asymmetric: index of its ZeroPoint tensor
    // Packed NVFP4: index of its GlobalScale tensor, and the Packed tensors whose absolute maximum
    // it is computed from (itself and the rest of the group vLLM fuses into one weight, q/k/v or
    // gate/up, which must share one global scale): every rank computes it alike, before quantizing.
    std::optional<size_t> global_scale_tensor;
    std::vector<size_t> global_scale_group;
    int64_t row_align = 1;           // rows are split only at multiples of this
    // Packed: weight rows per row of its Scale tensor (128 for block FP8, else 1), and the
    // dtype the unquantized merge writes the weight in: what is quantized is that weight.
    int64_t scale_row_block = 1;
    DType quantize_from = DType::F32;
    std::vector<unsigned char> constant;  // Constant: the bytes
    // A LoRA merge adds TensorMapping::lora_deltas[*lora_delta] to the assembled rows (lora.h).
    std::optional<size_t> lora_delta;
    // A block-quantized source (FP8 codes, or NVFP4/MXFP4 E2M1 codes): the assembled codes are
    // dequantized with TensorMapping::source_scales[*source_scales] before anything else sees the rows.
    std::optional<size_t> source_scales;
    // Not empty: the source holds two E2M1 codes a byte (low nibble first) and the copies fill
    // this shape of bytes (compressed-tensors weight_packed: [rows, cols / 2] of a weight
    // [rows, cols]; GPT-OSS expert blocks: [E, N, K / 32, 16] of a weight written [E, K, N]).
    Shape packed_codes_shape;
    // Not empty: the copies address the tensor as this shape, whose row-major elements are those
    // of `shape` (the same bytes, one axis split in two). GPT-OSS's fused experts interleave gate
    // and up along their last axis, [.., 2F] filled as [.., F, 2]: a box there is one half's
    // columns at stride 2, which no box of [.., 2F] states.
    Shape copies_view;
    // A quantized source tensor written as it is (block-FP8 pass-through): codes or scales, not
    // a tensor in the model dtype.
    bool quantized_as_stored = false;
    // Part of the extracted PEFT adapter (lora_adapter/adapter_model.safetensors), not the model.
    bool adapter = false;
    // The HF architecture keeps it in float32 whatever the model dtype (an architecture table's
    // keep_fp32, e.g. DeepSeek-V3's e_score_correction_bias): --dtype auto writes it as float32.
    bool keep_float32 = false;

    uint64_t nbytes() const { return static_cast<uint64_t>(numel(shape)) * element_size(dtype); }
    // The shape of the weight the rows hold, as floats: [out, in].
    const Shape& weight_shape() const { return source_shape.empty() ? shape : source_shape; }
    // The shape the copies fill (packed FP4 codes: half the columns, in bytes).
    Shape assembled_shape() const {
        if (!packed_codes_shape.empty()) return packed_codes_shape;
        return copies_view.empty() ? weight_shape() : copies_view;
    }
    // The elements of one row of the weight (a 3-D expert tensor: one expert).
    int64_t row_elements() const {
        const Shape& s = weight_shape();
        int64_t n = 1;
        for (size_t i = 1; i < s.size(); ++i) n *= s[i];
        return n;
    }
    // The bytes of one assembled row.
    uint64_t assembled_row_bytes() const {
        const Shape s = assembled_shape();
        int64_t n = 1;
        for (size_t i = 1; i < s.size(); ++i) n *= s[i];
        return static_cast<uint64_t>(n) * element_size(source_dtype);
    }
    // Written as part of another tensor's rows (no write task of its own).
    bool is_derived() const {
        return role == Role::QuantScale || role == Role::QuantZeroPoint || role == Role::QuantGlobalScale;
    }
};

// W += scale · L·R for the rows of one merged weight W [out, in]: L is [out, r] and R is
// [r, in], both assembled whole (they are small) from their own copies. A Linear's L is
// lora_B and R is lora_A; an Embedding's delta is (B·A)ᵀ, so L is lora_embedding_Aᵀ and R
// is lora_embedding_Bᵀ (`transposed`).
struct LoraDelta {
    OutputTensor a;  // lora_A [r, in] (Embedding: lora_embedding_A [r, vocab])
    OutputTensor b;  // lora_B [out, r] (Embedding: lora_embedding_B [dim, r])
    bool transposed = false;
    double scale = 0;
};

// What the codes of a quantized source weight are.
enum class SourceCodes {
    Fp8E4M3,  // one float8_e4m3fn code a byte (block FP8, compressed-tensors FP8)
    Nvfp4,    // E2M1 pairs; F8_E4M3 scales per 16 columns, divided by one F32 global scale
    Mxfp4,    // E2M1 pairs; UE8M0 scales (U8 biased exponents) per 32 columns
};

// The scales of a quantized source weight [out, in]. Block FP8 (DeepSeek-V3's `weight_scale_inv`):
// element (r, c) of the weight is float32(code) · scales[r / block_rows][c / block_cols], computed
// in float32 as transformers dequantizes it; the grid is ceil-sized, so edge blocks may be partial.
// NVFP4/MXFP4 (compressed-tensors): blocks of 1 × group, see exec/fp4_dequantize.h.
struct SourceScales {
    OutputTensor scales;  // [ceil(out / block_rows), ceil(in / block_cols)], assembled whole
    int64_t block_rows = 128;
    int64_t block_cols = 128;
    SourceCodes codes = SourceCodes::Fp8E4M3;
    // NVFP4: the weight_global_scale tensor (F32, one value) and its value, read while planning
    // (a fused group's parts are passed through only when they share it).
    std::optional<OutputTensor> global_scale;
    float global_scale_value = 1.0f;
    // GPT-OSS MXFP4 experts: codes [E, N, K/32, 16] with scales [E, N, K/32] dequantized per expert
    // into [N, K] and written transposed, [E, K, N], as transformers' dequantizer does.
    bool experts_transposed = false;

    static SourceScales block_grid(OutputTensor scales, int64_t block_rows, int64_t block_cols) {
        SourceScales s;
        s.scales = std::move(scales);
        s.block_rows = block_rows;
        s.block_cols = block_cols;
        return s;
    }
};

struct TensorMapping {
    std::vector<TensorRef> sources;
    std::vector<OutputTensor> tensors;  // in output (state dict) order
    std::vector<LoraDelta> lora_deltas;
    std::vector<SourceScales> source_scales;
    // Module paths of a PEFT-wrapped state dict that a saved-name rule renamed (apply_saved_names,
    // formats/table_mapping.h), by their new path: the run-time path the checkpoint had, which is
    // what PEFT itself knows the module by (its save_pretrained names, target_modules,
    // rank_pattern). Read by apply_lora for the exported adapter.
    std::map<std::string, std::string> peft_run_time_modules;
};

// The small tensors read whole beside `t`'s own rows: its LoRA factors and its source scales.
std::vector<const OutputTensor*> side_inputs(const TensorMapping& mapping, const OutputTensor& t);
// Those of every tensor of the mapping.
std::vector<const OutputTensor*> all_side_inputs(const TensorMapping& mapping);

// `from`'s tensors after `to`'s, their copies pointing at `from`'s sources appended to `to`'s
// (an adapter beside the base model it was trained on).
void append_mapping(TensorMapping& to, const TensorMapping& from);

// The output names given so far and the source key each came from: after every renaming
// rule, two source keys that give one output name, or a name safetensors reserves for its
// header, are an Error naming the source keys (a silently unreadable or overwritten tensor).
class OutputNames {
public:
    // `where`: the checkpoint the keys come from, for messages.
    explicit OutputNames(std::string where) : where_(std::move(where)) {}
    void claim(const std::string& name, const std::string& source_key);

private:
    std::string where_;
    std::map<std::string, std::string> source_of_;
};

// Throws Error unless the copies of `t` stay inside their source and output tensors and
// cover every output element exactly once.
void check_copies_tile_output(const OutputTensor& t, const std::vector<TensorRef>& sources);

}  // namespace vmerge
