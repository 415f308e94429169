#include "support/worker_pool.h"

#include "support/check.h"

namespace spillway {

WorkerPool::WorkerPool(int threads) {
  SPILLWAY_CHECK(threads > 0, "a worker pool needs at least one thread");
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Serve(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    ending_ = true;
  }
  wake_.notify_all();
  threads_.clear();  // joins
}

void WorkerPool::Run(const std::function<void()>& job, const std::function<void()>& here) {
  {
    std::lock_guard lock(mutex_);
    SPILLWAY_CHECK(running_ == 0, "WorkerPool::Run while another job runs");
    job_ = &job;
    running_ = size();
    ++generation_;
  }
  wake_.notify_all();
  here();
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
}

void WorkerPool::Serve() {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return ending_ || generation_ != seen; });
    if (ending_) return;
    seen = generation_;
    const std::function<void()>& job = *job_;
    lock.unlock();
    job();
    lock.lock();
    if (--running_ == 0) finished_.notify_all();
  }
}

}  // namespace spillway
