// Stop strings over streamed text: text arrives in pieces (one per generated token, already
// whole UTF-8 characters); what could still be the start of a stop string is held back, so the
// caller never shows text that a later piece turns into a stop. Generation ends as soon as a
// stop string is complete (as OpenAI's and vLLM's servers do), and the output ends right
// before it; of stop strings completed by the same character, the longest counts.
//
// Thread-compatible: one per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvtier::engine {

class StopText {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopText(std::vector<std::string> stops);

  struct Out {
    std::string text;      // safe to show now
    bool stopped = false;  // a stop string ended the output: nothing more will be accepted
  };
  Out Push(std::string_view piece);
  // What is held back, at the end of generation (empty once stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended the output ("" while none has).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a suffix of the text so far that is a proper prefix of a stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kvtier::engine
