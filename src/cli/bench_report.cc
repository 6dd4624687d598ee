// kvtier-bench's report writer (see bench_report.h).
#include "cli/bench_report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kvtier::cli {
namespace {

bool OnPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream ss(path);
  for (std::string d; std::getline(ss, d, ':');) {
    if (!d.empty() && access((d + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::string Printf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

TextTable::TextTable(std::vector<std::string> headers, int indent) : indent_(indent) {
  for (std::string& h : headers) {
    const bool left = !h.empty() && h[0] == '<';
    left_.push_back(left);
    headers_.push_back(left ? h.substr(1) : std::move(h));
  }
}

TextTable& TextTable::Row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
  return *this;
}

std::string TextTable::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) width[i] = headers_[i].size();
  for (const auto& r : rows_) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l(static_cast<size_t>(indent_), ' ');
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(width[i] - cells[i].size(), ' ');
      if (i > 0) l += "  ";
      l += left_[i] ? cells[i] + pad : pad + cells[i];
    }
    l.erase(l.find_last_not_of(' ') + 1);  // no trailing blanks (empty last cells)
    out += l + "\n";
  };
  if (std::any_of(headers_.begin(), headers_.end(),
                  [](const std::string& h) { return !h.empty(); })) {
    line(headers_);
  }
  for (const auto& r : rows_) line(r);
  return out;
}

std::string JsonText(const nlohmann::json& j, bool pretty) {
  return (pretty ? j.dump(2) : j.dump()) + "\n";
}

Status WritePlotScript(const std::string& dir, const PlotScript& p) {
  std::ofstream g(dir + "/" + p.name + ".gp");
  std::string plot;
  for (const std::string& s : p.series) plot += (plot.empty() ? "plot " : ", \\\n     ") + s;
  g << "reset\nset terminal png size 960,600\nset termoption noenhanced\nset output '" << p.name
    << ".png'\nset title '" << p.title << "'\nset xlabel '" << p.xlabel << "'\nset ylabel '"
    << p.ylabel << "'\nset grid\nset key below\n"
    << (p.logy ? "set logscale y\n" : "") << plot << "\n";
  if (!g) return Status::IOError("--plots: cannot write " + dir + "/" + p.name + ".gp");
  return Status::OK();
}

void RenderPlots(const std::string& dir, const std::vector<std::string>& names,
                 std::string* note) {
  std::string scripts, pngs;
  for (const std::string& n : names) {
    scripts += (scripts.empty() ? "" : " ") + n + ".gp";
    pngs += (pngs.empty() ? "" : ", ") + dir + "/" + n + ".png";
  }
  if (!OnPath("gnuplot")) {
    *note =
        "gnuplot not found (Debian: apt-get install gnuplot-nox): wrote the data files and "
        "scripts to " +
        dir + "; make the PNGs there with `gnuplot " + scripts + "`";
    return;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) _exit(126);
    std::vector<std::string> args = {"gnuplot"};
    for (const std::string& n : names) args.push_back(n + ".gp");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("gnuplot", argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    *note = "gnuplot failed on " + dir + "/{" + scripts + "}; the data files are there";
    return;
  }
  *note = "plots: " + pngs + " (data: " + dir + "/*.dat)";
}

}  // namespace kvtier::cli
