// StopText (engine/stop_text.h). Thread-compatible.
#include "engine/stop_text.h"

#include <algorithm>

namespace kvtier::engine {

StopText::StopText(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopText::Out StopText::Push(std::string_view piece) {
  Out out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(piece);
  // The stop string that is complete first ends the output (of those ending at the same
  // place, the longest), whatever the pieces were.
  size_t first = std::string::npos, end = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = buf.find(s);
    if (at == std::string::npos) continue;
    if (at + s.size() < end || (at + s.size() == end && at < first)) {
      first = at;
      end = at + s.size();
    }
  }
  if (first != std::string::npos) {
    matched_ = buf.substr(first, end - first);
    buf.resize(first);
    out.text = std::move(buf);
    out.stopped = stopped_ = true;
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, buf.size()); n > hold; --n) {
      if (std::string_view(buf).substr(buf.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  out.text = std::move(buf);
  return out;
}

std::string StopText::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace kvtier::engine
