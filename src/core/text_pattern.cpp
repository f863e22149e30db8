#include "core/text_pattern.h"

#include <re2/re2.h>

#include "core/error.h"

namespace vmerge {

TextPattern::TextPattern(const std::string& pattern, const std::string& what) {
    RE2::Options options;
    options.set_log_errors(false);
    auto re = std::make_shared<const RE2>(pattern, options);
    if (!re->ok())
        throw Error((what.empty() ? std::string() : what + ": ") + "'" + pattern +
                    "' is not a valid regular expression (" + re->error() + ")");
    re_ = std::move(re);
}

bool TextPattern::full_match(const std::string& text) const { return RE2::FullMatch(text, *re_); }

bool TextPattern::full_match(const std::string& text, TextMatch& match) const {
    const int groups = re_->NumberOfCapturingGroups();
    std::vector<re2::StringPiece> pieces(static_cast<size_t>(groups) + 1);
    if (!re_->Match(text, 0, text.size(), RE2::ANCHOR_BOTH, pieces.data(), groups + 1)) return false;
    match.groups.clear();
    for (const auto& piece : pieces) match.groups.emplace_back(piece.data() ? std::string(piece) : std::string());
    return true;
}

bool TextPattern::partial_match(const std::string& text) const { return RE2::PartialMatch(text, *re_); }

std::string TextPattern::replace_all(std::string text, const std::string& rewrite) const {
    RE2::GlobalReplace(&text, *re_, rewrite);
    return text;
}

}  // namespace vmerge
