#pragma once
#include <string>

namespace vmerge {

// The text of a small file that names another part of a checkpoint: DeepSpeed's `latest`
// (a tag), the latest_checkpointed_iteration.txt tracker (a step). One rule for all: a regular
// file `name` inside `folder` (a link that leaves the folder is refused, so no outside file's
// bytes reach a message), at most 4 KiB, printable text (no NUL or control bytes, which would
// cut or garble what the message shows); surrounding whitespace trimmed. `what` names the kind
// of file in messages ("DeepSpeed latest file").
std::string read_pointer_file(const std::string& folder, const std::string& name, const char* what);

// `text` as a message shows it: quoted, at most 40 characters, anything not printable as \xNN.
std::string shown_text(const std::string& text);

}  // namespace vmerge
