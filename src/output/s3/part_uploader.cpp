#include "output/s3/part_uploader.h"

namespace vmerge {

PartUploader::PartUploader(int threads, size_t in_flight) : in_flight_(in_flight < 1 ? 1 : in_flight) {
    for (int i = 0; i < (threads < 1 ? 1 : threads); ++i) threads_.emplace_back([this] { work(); });
}

PartUploader::~PartUploader() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        busy_ -= queue_.size();
        queue_.clear();
    }
    changed_.notify_all();
    for (auto& t : threads_) t.join();
}

void PartUploader::rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
}

void PartUploader::submit(std::function<void()> job) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return busy_ < in_flight_ || error_; });
    rethrow_locked();
    queue_.push_back(std::move(job));
    ++busy_;
    changed_.notify_all();
}

void PartUploader::wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return busy_ == 0 || error_; });
    rethrow_locked();
}

void PartUploader::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping
            job = std::move(queue_.front());
            queue_.pop_front();
        }
        std::exception_ptr failed;
        try {
            job();
        } catch (...) {
            failed = std::current_exception();
        }
        {
            std::lock_guard lock(mutex_);
            --busy_;
            if (failed && !error_) {
                error_ = failed;
                busy_ -= queue_.size();  // the rest is not worth sending
                queue_.clear();
            }
        }
        changed_.notify_all();
    }
}

}  // namespace vmerge
