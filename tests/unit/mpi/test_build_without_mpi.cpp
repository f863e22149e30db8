// The HDF5 archive in the two builds (-DVMERGE_MPI=ON, OFF): the MPI build takes --format hdf5,
// --backend hdf5 and verify of a model.h5; the build without MPI keeps their names and refuses
// each with the build option that has them, before any file is read or written.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "check_commands.h"
#include "core/error.h"
#include "formats/registry.h"
#include "mpi/parse_options.h"
#include "output/registry.h"
#include "single_rank_comm.h"
#include "test_support.h"

namespace vmerge {
namespace {

#ifdef VMERGE_NO_MPI
constexpr bool kArchiveBuilt = false;
#else
constexpr bool kArchiveBuilt = true;
#endif

const std::string kWhy =
    ": this vmerge-mpi was built without MPI (-DVMERGE_MPI=OFF), and the HDF5 archive is written and read with "
    "parallel HDF5; rebuild with -DVMERGE_MPI=ON (MPI and libhdf5-openmpi-dev) for it";

std::string usage_error(const std::vector<std::string>& args) {
    try {
        testing::parse_options(args);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

TEST(BuildWithoutMpi, TheArchiveKeepsItsNamesInEveryBuild) {
    EXPECT_TRUE(is_backend_value("hdf5"));
    EXPECT_NE(find_output_format("hdf5"), nullptr);
    EXPECT_EQ(backend_values().back(), "hdf5");
    EXPECT_EQ(output_format_choices(), "safetensors or hdf5");
}

TEST(BuildWithoutMpi, TheUnavailableArchiveNamesTheBuildOption) {
    EXPECT_EQ(hdf5_archive_unavailable("--format hdf5"), kArchiveBuilt ? "" : "--format hdf5" + kWhy);
}

TEST(BuildWithoutMpi, FormatAndBackendHdf5AreUsageErrorsWithoutMpi) {
    const std::string format = usage_error({"merge", "--local_dir", "c", "--target_dir", "t", "--format", "hdf5"});
    const std::string backend = usage_error({"merge", "--local_dir", "c", "--target_dir", "t", "--backend", "hdf5"});
    const std::string inspect = usage_error({"inspect", "--local_dir", "c", "--backend=hdf5"});
    EXPECT_EQ(format, kArchiveBuilt ? "" : "--format hdf5" + kWhy);
    EXPECT_EQ(backend, kArchiveBuilt ? "" : "--backend hdf5" + kWhy);
    EXPECT_EQ(inspect, kArchiveBuilt ? "" : "--backend hdf5" + kWhy);
    // Everything else parses the same in both builds.
    EXPECT_EQ(usage_error({"merge", "--local_dir", "c", "--target_dir", "t", "--format", "safetensors"}), "");
}

TEST(BuildWithoutMpi, AForcedArchiveBackendSaysWhyItFindsNothing) {
    if (kArchiveBuilt) GTEST_SKIP() << "the MPI build reads archives (tests/unit/formats/test_formats_registry.cpp)";
    testing::TempDir dir;
    dir.touch("model.h5");
    try {
        detect_checkpoint(dir.path(), "hdf5");
        FAIL() << "an archive was detected without an archive reader";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), dir.path() + ": --backend hdf5" + kWhy);
    }
}

TEST(BuildWithoutMpi, VerifyOfAnArchiveSaysWhyInsteadOfMissingWeights) {
    if (kArchiveBuilt) GTEST_SKIP() << "the MPI build verifies archives (tests/integration/hdf5_case.sh)";
    testing::TempDir dir;
    dir.touch("model.h5");
    const Options o = testing::parse_options({"verify", "--target_dir", dir.path()});
    SingleRankComm comm;
    std::ostringstream out;
    try {
        run_verify(o, comm, out);
        FAIL() << "verify passed an archive it cannot read";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), "verify --target_dir " + dir.path() + " (a model.h5 archive)" + kWhy);
    }
}

}  // namespace
}  // namespace vmerge
