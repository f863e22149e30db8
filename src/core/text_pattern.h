#pragma once
#include <memory>
#include <string>
#include <vector>

namespace re2 {
class RE2;
}

namespace vmerge {

// The groups of a match: [0] the whole text, [i] group i ("" when it took no part).
struct TextMatch {
    std::vector<std::string> groups;
    const std::string& operator[](size_t i) const { return groups.at(i); }
    const std::string& str(size_t i) const { return groups.at(i); }
};

// A regular expression over text that comes from a checkpoint, a config or the command line.
// RE2: linear time in the text and the pattern, no backtracking and no recursion, so no input
// (`(.|.|.|.)*Z` in an adapter_config.json, a 100 kB tensor name) can hang or overflow a merge
// the way std::regex does. Every matcher in vmerge is one of these.
class TextPattern {
public:
    // `what` names where the pattern came from, for the error when it is not valid RE2 syntax.
    explicit TextPattern(const std::string& pattern, const std::string& what = "");
    // The whole text matches.
    bool full_match(const std::string& text) const;
    bool full_match(const std::string& text, TextMatch& match) const;
    // Some part of the text matches.
    bool partial_match(const std::string& text) const;
    // Every non-overlapping match replaced by `rewrite` (\1 for a group).
    std::string replace_all(std::string text, const std::string& rewrite) const;

private:
    std::shared_ptr<const re2::RE2> re_;
};

}  // namespace vmerge
