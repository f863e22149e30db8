#include "vmerge/json_file.h"

#include <fstream>

#include "vmerge/error.h"

namespace vmerge {

nlohmann::json parse_json(std::istream& in, const std::string& path) {
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": not valid JSON: " + e.what());
    }
}

nlohmann::json read_json_file(const std::string& path) {
    std::ifstream in(path);
    return parse_json(in, path);
}

}  // namespace vmerge
