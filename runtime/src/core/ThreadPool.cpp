//===- ThreadPool.cpp - A persistent fork-join thread pool ----------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// parallelFor is called once per op, so thousands of times per inference:
// workers persist, spin briefly for the next job before sleeping on a
// condition variable, and take chunks from a shared atomic counter so that a
// slow (descheduled) worker does not hold the others up.
//
// Job lifetime: a worker joins a job only while it is open, and registers
// itself (inFlight) under the mutex before touching it. The caller closes the
// job once every chunk has been claimed and waits for the registered workers
// to finish; a worker that wakes up late sees the job closed and goes back
// to sleep, so the caller never waits for sleeping workers.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Runtime.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sparsec::rt {

namespace {

/// Set in pool workers (and in a thread while it runs parallelFor chunks),
/// so that nested calls run inline.
thread_local bool tlsInParallelFor = false;

/// Iterations a worker polls for a new job before blocking.
constexpr int kSpinIterations = 4000;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

} // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  bool stop = false;
  /// Incremented (under mutex) for every job; read without the lock while
  /// spinning.
  std::atomic<uint64_t> generation{0};
  bool jobOpen = false;
  /// Workers inside the current job; changed under mutex, read by the
  /// caller while it spins for the job's end.
  std::atomic<int> inFlight{0};
  /// Guards against concurrent parallelFor calls from different threads;
  /// the loser runs inline.
  std::atomic<bool> busy{false};

  // The current job; written under mutex before it is opened.
  const std::function<void(int64_t, int64_t)> *fn = nullptr;
  int64_t numChunks = 0, chunkBase = 0, chunkRem = 0;
  std::atomic<int64_t> nextChunk{0};

  void runChunks() {
    for (;;) {
      int64_t c = nextChunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= numChunks)
        return;
      int64_t begin = c * chunkBase + std::min(c, chunkRem);
      int64_t end = begin + chunkBase + (c < chunkRem ? 1 : 0);
      (*fn)(begin, end);
    }
  }

  void workerLoop() {
    tlsInParallelFor = true;
    uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < kSpinIterations &&
                      generation.load(std::memory_order_acquire) == seen;
           ++i)
        cpuRelax();
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] {
        return stop || generation.load(std::memory_order_relaxed) != seen;
      });
      if (stop)
        return;
      seen = generation.load(std::memory_order_relaxed);
      if (!jobOpen)
        continue;
      ++inFlight;
      lock.unlock();
      runChunks();
      lock.lock();
      if (--inFlight == 0 && !jobOpen)
        done.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int threads) : impl_(std::make_unique<Impl>()) {
  threads = std::clamp(threads, 1, 1024);
  impl_->workers.reserve(size_t(threads - 1));
  for (int i = 1; i < threads; ++i) {
    try {
      impl_->workers.emplace_back([impl = impl_.get()] { impl->workerLoop(); });
    } catch (const std::system_error &) {
      break; // Run with the threads we could start.
    }
  }
  threads_ = int(impl_->workers.size()) + 1;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  for (std::thread &t : impl_->workers)
    t.join();
}

void ThreadPool::parallelFor(
    int64_t n, int64_t grain,
    const std::function<void(int64_t begin, int64_t end)> &fn) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  if (threads_ == 1 || n <= grain || tlsInParallelFor) {
    fn(0, n);
    return;
  }
  bool expected = false;
  if (!impl_->busy.compare_exchange_strong(expected, true,
                                           std::memory_order_acquire)) {
    fn(0, n);
    return;
  }

  Impl &p = *impl_;
  // Chunks of at least `grain` items; a few per thread for load balance.
  int64_t numChunks = std::min<int64_t>(n / grain, int64_t(threads_) * 4);
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.fn = &fn;
    p.numChunks = numChunks;
    p.chunkBase = n / numChunks;
    p.chunkRem = n % numChunks;
    p.nextChunk.store(0, std::memory_order_relaxed);
    p.jobOpen = true;
    p.generation.fetch_add(1, std::memory_order_release);
  }
  if (numChunks - 1 >= int64_t(p.workers.size()))
    p.wake.notify_all();
  else
    for (int64_t i = 0; i < numChunks - 1; ++i)
      p.wake.notify_one();

  tlsInParallelFor = true;
  p.runChunks();
  tlsInParallelFor = false;

  // Close the job, then wait for the workers still in it: spinning first,
  // since they are usually a few microseconds from done and blocking would
  // add a futex wake-up (tens of microseconds on a VM) to every op that
  // finishes its own chunks first.
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.jobOpen = false;
  }
  for (int i = 0;
       i < kSpinIterations && p.inFlight.load(std::memory_order_acquire) != 0;
       ++i)
    cpuRelax();
  {
    std::unique_lock<std::mutex> lock(p.mutex);
    p.done.wait(lock, [&] { return p.inFlight.load() == 0; });
    p.fn = nullptr;
  }
  p.busy.store(false, std::memory_order_release);
}

} // namespace sparsec::rt
