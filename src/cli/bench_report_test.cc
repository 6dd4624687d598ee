// Tests of kvtier-bench's report writer (bench_report.h): the text table and the JSON line.
#include "cli/bench_report.h"

#include <gtest/gtest.h>

namespace kvtier::cli {
namespace {

TEST(TextTable, AlignsColumnsLeftOrRight) {
  TextTable t({"<name", "ms", "<note"});
  t.Row({"spill", "12.5", "fill 3 ms"}).Row({"reload, cold", "7.0", ""});
  EXPECT_EQ(t.Render(),
            "name            ms  note\n"
            "spill         12.5  fill 3 ms\n"
            "reload, cold   7.0\n");
}

TEST(TextTable, IndentsEveryLine) {
  TextTable t({"round", "requests"}, 2);
  t.Row({"1", "10"}).Row({"12", "3"});
  EXPECT_EQ(t.Render(),
            "  round  requests\n"
            "      1        10\n"
            "     12         3\n");
}

TEST(TextTable, EmptyHeadersPrintNoHeaderLine) {
  TextTable t({"<", "<"}, 2);
  t.Row({"server", "kvtier serve"}).Row({"TTFT ms", "p50 1.0"});
  EXPECT_EQ(t.Render(),
            "  server   kvtier serve\n"
            "  TTFT ms  p50 1.0\n");
}

TEST(BenchReport, PrintfAndJsonText) {
  EXPECT_EQ(Printf("%.2f %s", 1.005, "x"), "1.00 x");
  EXPECT_EQ(Printf("%s", ""), "");
  EXPECT_EQ(JsonText({{"a", 1}}), "{\"a\":1}\n");
  EXPECT_EQ(JsonText({{"a", 1}}, true), "{\n  \"a\": 1\n}\n");
}

}  // namespace
}  // namespace kvtier::cli
