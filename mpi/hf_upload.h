#pragma once
#include <ostream>
#include <string>

namespace vmerge {

// --hf_upload_path: the Hugging Face CLI found on PATH, `hf` (huggingface_hub >= 0.34) first,
// then `huggingface-cli`; "" when neither is there.
std::string find_hf_cli(const std::string& path_variable);

// Rank 0, before anything is read: Error when no CLI is on PATH (the merge would end with
// nothing to upload with).
std::string require_hf_cli(const std::string& repo);

// Rank 0, after the commit: checks the folder against the checksums merge recorded (Error
// on any difference: nothing is uploaded), then runs `<cli> upload REPO FOLDER [--private]`
// and waits for it; a failing upload is an Error that says the merged folder stays.
void upload_merged_folder(const std::string& cli, const std::string& repo, const std::string& folder,
                          bool private_repo, std::ostream& out);

}  // namespace vmerge
