#include "hf_upload.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "output/write_journal.h"

namespace vmerge {
namespace fs = std::filesystem;

std::string find_hf_cli(const std::string& path_variable) {
    for (const char* name : {"hf", "huggingface-cli"}) {
        size_t start = 0;
        while (start <= path_variable.size()) {
            const size_t colon = std::min(path_variable.find(':', start), path_variable.size());
            const std::string dir = path_variable.substr(start, colon - start);
            const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
            std::error_code ec;
            if (fs::is_regular_file(candidate, ec) && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
            start = colon + 1;
        }
    }
    return "";
}

std::string require_hf_cli(const std::string& repo) {
    const char* path = std::getenv("PATH");
    const std::string cli = find_hf_cli(path ? path : "");
    if (cli.empty())
        throw Error("--hf_upload_path " + repo + ": neither `hf` nor `huggingface-cli` is on PATH (pip install "
                    "huggingface_hub, then log in with `hf auth login`); nothing was merged");
    return cli;
}

void upload_merged_folder(const std::string& cli, const std::string& repo, const std::string& folder,
                          bool private_repo, std::ostream& out) {
    if (fs::exists(fs::path(folder) / kChecksumsFile)) {
        const auto problems = verify_checksums(folder);
        if (!problems.empty())
            throw Error(folder + ": " + std::to_string(problems.size()) + " ranges differ from what merge wrote (" +
                        problems.front() + "); not uploaded to " + repo);
    }
    std::vector<std::string> args{cli, "upload", repo, folder, "--repo-type", "model"};
    if (private_repo) args.push_back("--private");
    std::string line;
    for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
    out << "vmerge: uploading: " << line << std::endl;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw Error("--hf_upload_path: cannot start " + cli + ": " + std::strerror(errno));
    if (pid == 0) {
        ::execv(cli.c_str(), argv.data());
        ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(line + " failed (" +
                    (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : std::string("killed")) +
                    "); the merged folder " + folder + " stays, upload it again with that command");
    out << "vmerge: uploaded " << folder << " to " << repo << "\n";
}

}  // namespace vmerge
