// kvtier-bench's one writer of reports: text tables (TextTable), the JSON object each command
// prints with --json (JsonText), and gnuplot data / scripts / PNGs (WritePlotScript,
// RenderPlots). Pure functions and a value type; thread-compatible.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

// printf into a std::string.
std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Columns as wide as their widest cell, two spaces apart (plus `indent` before each line).
// A header starting with '<' is left-aligned (the '<' is dropped), else right-aligned. When
// every header is empty there is no header line (a list of label / value rows). Lines end
// without trailing blanks.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers, int indent = 0);
  TextTable& Row(std::vector<std::string> cells);
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
  int indent_;
};

// The report's one JSON object and a newline (`pretty`: indented by 2).
std::string JsonText(const nlohmann::json& j, bool pretty = false);

// <dir>/<name>.gp drawing `series` (gnuplot plot terms) to <name>.png; starts with reset, so
// several scripts run in one gnuplot session.
struct PlotScript {
  std::string name;    // file stem
  std::string title, xlabel, ylabel;
  bool logy = false;
  std::vector<std::string> series;
};
Status WritePlotScript(const std::string& dir, const PlotScript& p);
// Runs gnuplot on `names` (.gp) in dir when it is installed; *note says what was written
// (or that gnuplot is missing or failed: not an error, the data and scripts are there).
void RenderPlots(const std::string& dir, const std::vector<std::string>& names,
                 std::string* note);

}  // namespace kvtier::cli
