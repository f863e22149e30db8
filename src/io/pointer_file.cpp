#include "io/pointer_file.h"

#include <cstdio>

#include "core/error.h"
#include "io/contained_path.h"
#include "io/input_file.h"

namespace vmerge {
namespace {

bool printable(unsigned char c) { return c >= 0x20 && c != 0x7f; }
bool space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::string read_pointer_file(const std::string& folder, const std::string& name, const char* what) {
    const std::string path = path_inside(folder, name, std::string(what));
    std::string text = read_small_file(path, 4096, what);
    size_t begin = 0, end = text.size();
    while (begin < end && space(text[begin])) ++begin;
    while (end > begin && space(text[end - 1])) --end;
    text = text.substr(begin, end - begin);
    for (size_t i = 0; i < text.size(); ++i)
        if (!printable(static_cast<unsigned char>(text[i])) && !space(static_cast<unsigned char>(text[i])))
            throw Error(path + ": not a line of text (byte " + std::to_string(begin + i) + " is " +
                        shown_text(text.substr(i, 1)) + "); expected " + what + " to hold a name or a number");
    return text;
}

std::string shown_text(const std::string& text) {
    std::string out = "'";
    for (size_t i = 0; i < text.size() && i < 40; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (printable(c) && c < 0x80) {
            out += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        }
    }
    return out + (text.size() > 40 ? "...'" : "'");
}

}  // namespace vmerge
