#pragma once

namespace vmerge {

// The exit codes of vmerge-mpi, in one place for the program and its docs: the table under
// "Exit codes" in docs/usage.md must list exactly these (tests/docs/check_docs.py reads this
// file, so keep one `name = value,  // when` line per code).
enum ExitCode : int {
    kExitSuccess = 0,  // the command did what was asked; --help, --version
    kExitFailure = 1,  // an Error (bad input, write failure, ...); test found differences; verify a mismatch; watch a failed step
    kExitUsage = 2,    // a usage error: the command line names no command, an unknown option or a bad value
};

}  // namespace vmerge
