// ThreadPool implementation: generation-counted wake-ups, atomic chunk claiming. Workers and
// the caller spin briefly before blocking, because a condition-variable wake-up on a busy
// or virtualised machine can take longer than a whole parallel step (measured: without the
// spin, a 2-thread pool ran quantization no faster than 1 thread).
#include "kvtier/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVTIER_CPU_RELAX() _mm_pause()
#else
#define KVTIER_CPU_RELAX() std::this_thread::yield()
#endif

namespace kvtier {
namespace {
constexpr int kSpinIterations = 1 << 14;  // ~50-150 us of pause instructions
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const size_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + grain_));
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    for (int i = 0; i < kSpinIterations && !ready(); ++i) KVTIER_CPU_RELAX();
    if (!ready()) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  const size_t threads = static_cast<size_t>(num_threads());
  if (grain == 0) grain = (n + threads - 1) / threads;
  if (workers_.empty() || n <= grain) {
    for (size_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks();
  auto done = [&] { return active_.load(std::memory_order_acquire) == 0; };
  for (int i = 0; i < kSpinIterations && !done(); ++i) KVTIER_CPU_RELAX();
  if (!done()) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  fn_ = nullptr;
}

}  // namespace kvtier
