// Monotonic wall-clock timer (std::chrono::steady_clock). Value type; not shared.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvtier {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void Reset() { start_ = Clock::now(); }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double Millis() const { return Seconds() * 1e3; }
  int64_t Nanos() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace kvtier
