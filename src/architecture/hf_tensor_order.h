#pragma once
#include <string>

namespace vmerge {

// The order a Hugging Face checkpoint lists tensors in: embedding, layers (layer 10 after
// layer 9: numbers inside names compare as numbers), final norm, head.
bool hf_tensor_less(const std::string& a, const std::string& b);

}  // namespace vmerge
