#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vmerge {

// A flag that belongs to some layouts, not to every merge (--iteration, --tag, --lora_base,
// --exclude_frozen_parameters, ...). A layout lists the ones it reads (Backend::flags); the
// command line offers every flag the registry's layouts list, and a flag given for a
// checkpoint whose layout does not read it is refused after detection, never ignored. A new
// layout with a flag of its own defines it in its folder: no shared option struct to edit.
struct BackendFlag {
    enum class Kind {
        Switch,  // --name, no value
        Count,   // --name N, a whole number from 0 to kMaxIteration (core/bounded_number.h)
        Text,    // --name TEXT, not empty
        Folder,  // --name DIR: an input folder (the output may never overlap it)
    };
    std::string name;        // as typed, without the dashes: "iteration"
    Kind kind = Kind::Text;
    std::string short_name;  // a one-letter alias ("t" for --tag), or ""
    std::string help;        // the --help text
    std::string expected;    // Text, Folder: what an empty value should have been
    // Why the flag means nothing for another layout, after "<dir> was read as <layout>, which ".
    std::string refusal;
};

// The layout flags of one run, as given: each layout reads its own.
class BackendFlags {
public:
    void set(const std::string& name, std::string value) { values_[name] = std::move(value); }
    void erase(const std::string& name) { values_.erase(name); }
    bool given(const std::string& name) const { return values_.count(name) > 0; }
    // The value of a Text or Folder flag; "" when it was not given.
    std::string text(const std::string& name) const;
    // The value of a Count flag (checked by the command line); nullopt when not given.
    std::optional<int> count(const std::string& name) const;
    const std::map<std::string, std::string>& values() const { return values_; }

private:
    std::map<std::string, std::string> values_;
};

// The flags several layouts share, defined once (a layout's own flags live in its folder).
const BackendFlag& iteration_flag();  // Megatron-LM iter_N/, torchtitan step-N/
const BackendFlag& lora_base_flag();  // the HF base model of an adapter-only checkpoint

}  // namespace vmerge
