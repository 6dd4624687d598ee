// StopText against a simple model: the whole text cut before the earliest stop string.
#include "engine/stop_text.h"

#include <gtest/gtest.h>

#include <random>

namespace kvtier::engine {
namespace {

// The model, one character at a time: the first character that completes a stop string ends
// the output, which is the text before that stop string (the longest, if several end there).
std::string Expected(const std::string& text, const std::vector<std::string>& stops,
                     bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const std::string& s : stops) {
      if (!s.empty() && s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        start = std::min(start, end - s.size());
      }
    }
    if (start != std::string::npos) {
      *stopped = true;
      return text.substr(0, start);
    }
  }
  *stopped = false;
  return text;
}

TEST(StopText, CutsBeforeTheStopAcrossPieces) {
  StopText st({"\n\nUser:", "END"});
  std::string out;
  for (const char* p : {"Hello", " world\n", "\nUs", "er: more"}) {
    StopText::Out o = st.Push(p);
    out += o.text;
    if (o.stopped) break;
  }
  EXPECT_TRUE(st.stopped());
  EXPECT_EQ(out, "Hello world");
}

TEST(StopText, HeldTextComesBackWhenNoStopFollows) {
  StopText st({"abc"});
  StopText::Out o = st.Push("xxab");
  EXPECT_EQ(o.text, "xx");  // "ab" may begin "abc"
  o = st.Push("d");
  EXPECT_EQ(o.text, "abd");
  o = st.Push("a");
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(st.Flush(), "a");
  EXPECT_FALSE(st.stopped());
  EXPECT_EQ(st.matched(), "");
}

TEST(StopText, TheStopCompletedFirstWins) {
  StopText st({"cd", "b"});
  StopText::Out o = st.Push("abcd");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "a");
  EXPECT_EQ(st.matched(), "b");
  // "abc" starts first, but "b" is complete first.
  StopText st2({"abc", "b"});
  EXPECT_EQ(st2.Push("abc").text, "a");
  // Both end at the same character: the longer one counts.
  StopText st3({"c", "bc"});
  EXPECT_EQ(st3.Push("abc").text, "a");
  EXPECT_EQ(st3.matched(), "bc");
  EXPECT_TRUE(st.Push("more").stopped);
  EXPECT_EQ(st.Push("more").text, "");
}

TEST(StopText, NoStopsPassesEverythingThrough) {
  StopText st({"", ""});
  EXPECT_EQ(st.Push("abc").text, "abc");
  EXPECT_EQ(st.Flush(), "");
}

TEST(StopText, RandomPiecesMatchTheModel) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\nc";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int ns = static_cast<int>(rng() % 4);
    for (int s = 0; s < ns; ++s) {
      std::string stop;
      const int sl = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < sl; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    bool want_stop = false;
    const std::string want = Expected(text, stops, &want_stop);
    StopText st(stops);
    std::string out;
    bool stopped = false;
    for (size_t pos = 0; pos < text.size() && !stopped;) {
      const size_t n = std::min<size_t>(text.size() - pos, 1 + rng() % 5);
      StopText::Out o = st.Push(std::string_view(text).substr(pos, n));
      out += o.text;
      stopped = o.stopped;
      pos += n;
      // Whatever was shown is final: a prefix of the answer.
      ASSERT_EQ(want.compare(0, out.size(), out), 0) << text;
    }
    if (!stopped) out += st.Flush();
    EXPECT_EQ(stopped, want_stop) << text;
    EXPECT_EQ(out, want) << text;
  }
}

}  // namespace
}  // namespace kvtier::engine
