// A fixed set of threads that run one job together, as often as asked.
//
// The planner evaluates candidate Programs side by side hundreds of times in
// one planning, a few candidates each time. Threads made and joined for each
// of those calls cost their start-up, and every thread_local cache the
// evaluation keeps (the arena layout's segment tree above all) starts cold on
// each of them; the threads of a pool, and their caches, outlive every job.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spillway {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();  // waits for the threads to end (no job is running then)
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }

  // Runs `job` once on every thread of the pool and `here` on the calling
  // thread at the same time, and returns when all of them have returned. One
  // Run at a time: the calling thread is not one of the pool's.
  void Run(const std::function<void()>& job, const std::function<void()>& here);

 private:
  void Serve();

  std::mutex mutex_;
  std::condition_variable wake_;      // a job was posted, or the pool ends
  std::condition_variable finished_;  // a thread returned from the job
  const std::function<void()>* job_ = nullptr;
  uint64_t generation_ = 0;  // how many jobs have been posted
  int running_ = 0;          // threads still in the current job
  bool ending_ = false;
  std::vector<std::jthread> threads_;  // last: they start once the rest is set up
};

}  // namespace spillway
