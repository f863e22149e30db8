#include "architecture/hf_tensor_order.h"

#include <cctype>

namespace vmerge {
namespace {

bool natural_less(const std::string& a, const std::string& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const bool da = std::isdigit(static_cast<unsigned char>(a[i])), db = std::isdigit(static_cast<unsigned char>(b[j]));
        if (da && db) {
            size_t ie = i, je = j;
            while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
            while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
            if (ie - i != je - j) return ie - i < je - j;
            const int c = a.compare(i, ie - i, b, j, je - j);
            if (c != 0) return c < 0;
            i = ie;
            j = je;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i;
            ++j;
        }
    }
    return a.size() - i < b.size() - j;
}

int section(const std::string& name) {
    if (name.starts_with("model.embed_tokens")) return 0;
    if (name.starts_with("model.layers.")) return 1;
    if (name.starts_with("model.")) return 2;
    return 3;
}

}  // namespace

bool hf_tensor_less(const std::string& a, const std::string& b) {
    const int sa = section(a), sb = section(b);
    return sa != sb ? sa < sb : natural_less(a, b);
}

}  // namespace vmerge
