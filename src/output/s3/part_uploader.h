#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vmerge {

// Runs a rank's part uploads on threads of its own, so that the copy goes on while parts travel
// and several requests are open at once (one HTTP stream to a store seldom fills the link).
// At most `in_flight` jobs are queued or running: submit waits for room, which bounds the parts
// held in memory. The first job that throws stops the rest (queued jobs are dropped) and its
// error is rethrown by the next submit or wait.
class PartUploader {
public:
    PartUploader(int threads, size_t in_flight);
    ~PartUploader();  // drops queued jobs, waits for the running ones; errors are not rethrown
    PartUploader(const PartUploader&) = delete;
    PartUploader& operator=(const PartUploader&) = delete;

    void submit(std::function<void()> job);
    // Every submitted job finished; rethrows the first error.
    void wait();

private:
    void work();
    void rethrow_locked();
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::function<void()>> queue_;
    size_t busy_ = 0;  // queued + running
    size_t in_flight_;
    bool stopping_ = false;
    std::exception_ptr error_;
    std::vector<std::thread> threads_;
};

}  // namespace vmerge
