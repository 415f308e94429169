#include "support/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

namespace spillway {
namespace {

TEST(WorkerPool, RunsTheJobOnceOnEveryThreadBesideTheCallersWork) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  std::mutex mutex;
  std::multiset<std::thread::id> ran_on;
  bool ran_here = false;
  pool.Run(
      [&] {
        std::lock_guard lock(mutex);
        ran_on.insert(std::this_thread::get_id());
      },
      [&] { ran_here = true; });
  EXPECT_TRUE(ran_here);
  ASSERT_EQ(ran_on.size(), 3u);
  EXPECT_EQ(std::set<std::thread::id>(ran_on.begin(), ran_on.end()).size(), 3u);
  EXPECT_EQ(ran_on.count(std::this_thread::get_id()), 0u);
}

TEST(WorkerPool, KeepsItsThreadsFromOneJobToTheNext) {
  WorkerPool pool(2);
  std::mutex mutex;
  std::set<std::thread::id> first, second;
  auto record = [&](std::set<std::thread::id>& into) {
    return [&] {
      std::lock_guard lock(mutex);
      into.insert(std::this_thread::get_id());
    };
  };
  pool.Run(record(first), [] {});
  pool.Run(record(second), [] {});
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(first, second);
}

TEST(WorkerPool, ReturnsOnlyWhenEveryThreadHasFinished) {
  WorkerPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> finished = 0;
    pool.Run(
        [&] {
          std::this_thread::yield();
          finished.fetch_add(1);
        },
        [] {});
    ASSERT_EQ(finished.load(), 4) << "round " << round;
  }
}

}  // namespace
}  // namespace spillway
