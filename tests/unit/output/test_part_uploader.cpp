// The uploader threads of a merge into a bucket (output/s3/part_uploader.h): every job runs, no
// more than the bound wait at once, and the first error comes back to the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "output/s3/part_uploader.h"

namespace vmerge {
namespace {

TEST(PartUploader, RunsEveryJobWithinTheBound) {
    std::atomic<int> done{0}, open{0}, most{0};
    PartUploader uploader(3, 3);
    for (int i = 0; i < 40; ++i)
        uploader.submit([&] {
            const int now = ++open;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            --open;
            ++done;
        });
    uploader.wait();
    EXPECT_EQ(done.load(), 40);
    EXPECT_LE(most.load(), 3);
}

TEST(PartUploader, TheFirstErrorStopsTheRestAndIsRethrown) {
    std::atomic<int> done{0};
    PartUploader uploader(2, 2);
    uploader.submit([] { throw Error("s3://b/k: cannot upload part 1"); });
    bool thrown = false;
    try {
        for (int i = 0; i < 100; ++i) uploader.submit([&] { ++done; });
        uploader.wait();
    } catch (const Error& e) {
        thrown = std::string(e.what()).find("part 1") != std::string::npos;
    }
    EXPECT_TRUE(thrown);
    EXPECT_LT(done.load(), 100);
}

}  // namespace
}  // namespace vmerge
