// `kvtier-bench serve` (bench_serve.h): the child server, the metrics poller and the run; the
// flags are in commands.cc.
#include "cli/bench_serve.h"

#include <fcntl.h>
#include <httplib.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "cli/flags.h"
#include "cli/model_session.h"
#include "cli/serve.h"

#ifndef KVTIER_SERVE_TEXT
#define KVTIER_SERVE_TEXT "data/corpus/eval.txt"
#endif

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

using bench_serve::Calibrate;
using bench_serve::Endpoint;
using bench_serve::kCalibrationChars;
using bench_serve::kDefaultCharsPerToken;
using bench_serve::TextSource;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// VmHWM of /proc/PID/status in bytes; 0 when unreadable.
uint64_t ReadPeakRss(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

// `--flag value` or `--flag=value` in args.
bool FindFlag(const std::vector<std::string>& args, const std::string& flag, std::string* value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      if (value != nullptr) *value = i + 1 < args.size() ? args[i + 1] : "";
      return true;
    }
    if (args[i].rfind(flag + "=", 0) == 0) {
      if (value != nullptr) *value = args[i].substr(flag.size() + 1);
      return true;
    }
  }
  return false;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

// `kvtier serve` as a child process (`server_bin`, else the kvtier binary beside this one);
// stderr goes to a log file.
class ServerChild {
 public:
  static Result<std::unique_ptr<ServerChild>> Start(const std::string& server_bin,
                                                    const std::vector<std::string>& extra,
                                                    double timeout_s, const std::string& keep_log) {
    auto s = std::unique_ptr<ServerChild>(new ServerChild());
    std::string bin = server_bin;
    if (bin.empty()) {
      char exe[PATH_MAX];
      const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      if (n <= 0) return Status::Internal("cannot read /proc/self/exe");
      exe[n] = '\0';
      bin = std::string(exe);
      bin = bin.substr(0, bin.rfind('/') + 1) + "kvtier";
    }
    if (access(bin.c_str(), X_OK) != 0) {
      return Status::InvalidArgument("--server-bin: " + bin + " is not an executable kvtier");
    }
    std::vector<std::string> args = {bin, "serve"};
    if (!FindFlag(extra, "--port", nullptr)) args.insert(args.end(), {"--port", "0"});
    if (!FindFlag(extra, "--host", nullptr)) args.insert(args.end(), {"--host", "127.0.0.1"});
    args.insert(args.end(), extra.begin(), extra.end());
    s->args_ = Join(std::vector<std::string>(args.begin() + 1, args.end()));
    int log_fd = -1;
    if (!keep_log.empty()) {
      log_fd = open(keep_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log_fd < 0) {
        return Status::IOError("--server-log: cannot open " + keep_log + " for appending");
      }
      s->log_path_ = keep_log;
      s->keep_log_ = true;
    } else {
      char log_path[] = "/tmp/kvtier-bench-serve-XXXXXX.log";
      log_fd = mkstemps(log_path, 4);
      if (log_fd < 0) return Status::IOError("cannot create a log file in /tmp");
      s->log_path_ = log_path;
    }
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(log_fd);
      return Status::IOError("pipe failed");
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the benchmark
      dup2(out[1], STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    close(log_fd);
    if (pid < 0) {
      close(out[0]);
      return Status::Internal("fork failed");
    }
    s->pid_ = pid;
    s->out_fd_ = out[0];
    // "kvtier serve: listening on http://HOST:PORT model=ID"
    std::string line;
    const Clock::time_point t0 = Clock::now();
    while (line.find('\n') == std::string::npos) {
      if (MsSince(t0) > timeout_s * 1e3) {
        return Status::Unavailable("`" + s->args_ + "` did not start within " +
                                   std::to_string(static_cast<int>(timeout_s)) + " s" +
                                   s->LogTail());
      }
      pollfd p{s->out_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      const ssize_t got = read(s->out_fd_, buf, sizeof buf);
      if (got <= 0) {
        int status = 0;
        waitpid(s->pid_, &status, 0);
        s->pid_ = -1;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // A bad server flag is a bad kvtier-bench serve flag too.
        const std::string msg = "`" + s->args_ + "` exited with status " + std::to_string(code) +
                                " before listening" + s->LogTail();
        return code == 2 ? Status::InvalidArgument(msg) : Status::Unavailable(msg);
      }
      line.append(buf, static_cast<size_t>(got));
    }
    line.resize(line.find('\n'));
    const size_t at = line.find("listening on ");
    if (at == std::string::npos) {
      return Status::Internal("unexpected first line from kvtier serve: " + line);
    }
    const size_t url_end = line.find(' ', at + 13);
    s->url_ =
        line.substr(at + 13, url_end == std::string::npos ? std::string::npos : url_end - at - 13);
    const size_t m = line.find("model=");
    if (m != std::string::npos) s->model_id_ = line.substr(m + 6);
    return s;
  }

  ~ServerChild() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      if (!WaitExit(10, nullptr)) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (!log_path_.empty() && !keep_log_) std::remove(log_path_.c_str());  // errors carry its tail
  }

  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  std::string Describe() const {
    return "kvtier serve pid " + std::to_string(pid_) + " at " + url_ +
           (model_id_.empty() ? "" : " model=" + model_id_) + " (" + args_ + ")";
  }
  uint64_t PeakRss() const { return pid_ > 0 ? ReadPeakRss(pid_) : 0; }

  // SIGTERM (the server drains and exits 0); an error if it does not within `timeout_s`.
  Status Stop(double timeout_s) {
    if (pid_ <= 0) return Status::OK();
    kill(pid_, SIGTERM);
    int code = 0;
    if (!WaitExit(timeout_s, &code)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return Status::Unavailable("kvtier serve did not exit within " +
                                 std::to_string(static_cast<int>(timeout_s)) + " s of SIGTERM" +
                                 LogTail());
    }
    if (code != 0) {
      return Status::Internal("kvtier serve exited with status " + std::to_string(code) +
                              " after SIGTERM" + LogTail());
    }
    return Status::OK();
  }

 private:
  ServerChild() = default;

  bool WaitExit(double timeout_s, int* code) {
    const Clock::time_point t0 = Clock::now();
    while (MsSince(t0) < timeout_s * 1e3) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (code != nullptr) {
          *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string LogTail() const {
    std::ifstream f(log_path_);
    const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string tail = all.size() > 2000 ? all.substr(all.size() - 2000) : all;
    return "; its log ends:\n" + tail;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool keep_log_ = false;  // --server-log: the user's file, kept
  std::string log_path_, url_, model_id_, args_;
};

// Polls /metrics every `interval` seconds and keeps the largest kvtier_kv_bytes per series.
class MetricsPoller {
 public:
  MetricsPoller(const Endpoint& ep, double interval_s) : ep_(ep), interval_s_(interval_s) {}
  ~MetricsPoller() { Stop(); }
  void Start() {
    Scrape();
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_s_),
                           [this] { return stop_; })) {
        lock.unlock();
        Scrape();
        lock.lock();
      }
    });
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    Scrape();
  }
  std::vector<BenchServeKvBytes> Max() const {
    std::lock_guard<std::mutex> lock(data_mu_);
    std::vector<BenchServeKvBytes> out;
    for (const auto& [key, bytes] : max_) out.push_back({key.first, key.second, bytes});
    return out;
  }
  bool seen() const {
    std::lock_guard<std::mutex> lock(data_mu_);
    return seen_;
  }
  std::string active_format() const {
    std::lock_guard<std::mutex> lock(data_mu_);
    return active_format_;
  }

 private:
  void Scrape() {
    httplib::Client cli(ep_.origin);
    cli.set_connection_timeout(2);
    cli.set_read_timeout(5);
    const httplib::Result res = cli.Get((ep_.base + "/metrics").c_str());
    if (!res || res->status != 200) return;
    const std::vector<BenchServeKvBytes> kv = bench_serve::ParseKvBytes(res->body);
    std::lock_guard<std::mutex> lock(data_mu_);
    for (const BenchServeKvBytes& k : kv) {
      seen_ = true;
      double& m = max_[{k.tier, k.format}];
      m = std::max(m, k.bytes);
      if (k.tier == "active" && active_format_.empty()) active_format_ = k.format;
    }
  }

  const Endpoint ep_;
  const double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  mutable std::mutex data_mu_;
  std::map<std::pair<std::string, std::string>, double> max_;
  bool seen_ = false;
  std::string active_format_;
};

class Progress {
 public:
  Progress(std::function<void(int, int)> fn, int total) : fn_(std::move(fn)), total_(total) {}
  void Step() {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    if (fn_) fn_(std::min(done_, total_), total_);
  }

 private:
  std::mutex mu_;
  std::function<void(int, int)> fn_;
  int done_ = 0;
  const int total_;
};

const std::vector<std::string>& Workloads() {
  static const std::vector<std::string> w = {"multiturn", "two-round", "batched-histories",
                                             "concurrency", "agent"};
  return w;
}

int RequestsPerRun(const BenchServeConfig& c) {
  if (c.workload == "two-round") return 2;
  if (c.workload == "multiturn") return static_cast<int>(c.conversations * c.rounds);
  if (c.workload == "batched-histories") return static_cast<int>(2 * c.batch);
  if (c.workload == "agent") return static_cast<int>(c.rounds);
  return static_cast<int>(c.clients * c.requests_per_client);
}

// The context length of a run (the plots' x) and the longest request it sends, in tokens.
uint32_t ContextOf(const BenchServeConfig& c) {
  if (c.workload == "two-round") return c.context_tokens;
  if (c.workload == "batched-histories") return c.history_tokens;
  if (c.workload == "multiturn") return c.system_tokens + c.rounds * (c.turn_tokens + c.max_tokens);
  if (c.workload == "agent") return c.system_tokens + 600 + c.rounds * (c.turn_tokens + 120);
  return c.prompt_tokens;
}
uint32_t LongestRequest(const BenchServeConfig& c) {
  uint32_t n = ContextOf(c) + c.max_tokens;
  if (c.workload == "two-round" || c.workload == "batched-histories") n += c.turn_tokens + 32;
  // The calibration request is at most ~1 token per char (byte-level vocabularies).
  return std::max(n, static_cast<uint32_t>(kCalibrationChars) + 64);
}

Status CheckConfig(const BenchServeConfig& c) {
  if (std::find(Workloads().begin(), Workloads().end(), c.workload) == Workloads().end()) {
    return Status::InvalidArgument(
        "--workload: expected multiturn, two-round, "
        "batched-histories, concurrency or agent, got '" +
        c.workload + "'");
  }
  if (c.api != "completions" && c.api != "chat") {
    return Status::InvalidArgument("--api: expected completions or chat, got '" + c.api + "'");
  }
  if (c.workload == "agent" && c.api != "chat") {
    return Status::InvalidArgument("--workload agent: needs --api chat (it sends tools and "
                                   "tool messages), got --api " + c.api);
  }
  constexpr long long kMaxTokens = 1 << 20;
  KVTIER_RETURN_IF_ERROR(CheckRange("--conversations", c.conversations, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--rounds", c.rounds, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--system-tokens", c.system_tokens, 1, kMaxTokens));
  KVTIER_RETURN_IF_ERROR(CheckRange("--turn-tokens", c.turn_tokens, 1, kMaxTokens));
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-tokens", c.max_tokens, 1, kMaxTokens));
  if (!c.response_format.empty() && !nlohmann::json::accept(c.response_format)) {
    return Status::InvalidArgument("--response-format: expected a JSON object, got '" +
                                   c.response_format + "'");
  }
  KVTIER_RETURN_IF_ERROR(CheckRange("--context-tokens", c.context_tokens, 1, kMaxTokens));
  KVTIER_RETURN_IF_ERROR(CheckRange("--batch", c.batch, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--history-tokens", c.history_tokens, 1, kMaxTokens));
  KVTIER_RETURN_IF_ERROR(CheckRange("--clients", c.clients, 1, 1024));
  KVTIER_RETURN_IF_ERROR(CheckRange("--requests-per-client", c.requests_per_client, 1, 1 << 16));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prompt-tokens", c.prompt_tokens, 1, kMaxTokens));
  if (!(c.timeout_s > 0)) return Status::InvalidArgument("--timeout: expected more than 0");
  if (!(c.chars_per_token >= 0) || c.chars_per_token > 1000) {
    return Status::InvalidArgument("--chars-per-token: expected 0 (calibrate) to 1000, got " +
                                   std::to_string(c.chars_per_token));
  }
  if (!(c.metrics_interval_s > 0)) {
    return Status::InvalidArgument("--metrics-interval: expected more than 0");
  }
  if (!c.url.empty()) KVTIER_RETURN_IF_ERROR(bench_serve::ParseUrl(c.url).status());
  if (!c.url.empty() && !c.server_args.empty()) {
    return Status::InvalidArgument("--server-arg: the server is not started here with --url");
  }
  if (c.url.empty() && c.server_pid != 0) {
    return Status::InvalidArgument("--server-pid: only with --url (the child's pid is known)");
  }
  const size_t n_formats = SplitComma(c.kv_types).size();
  const bool sweep = !c.sweep_contexts.empty() || n_formats > 1;
  if (sweep && c.workload != "two-round" && c.workload != "batched-histories") {
    return Status::InvalidArgument(
        "--sweep-contexts / --kv-type with several formats: only with --workload "
        "two-round or batched-histories, got " +
        c.workload);
  }
  if (!c.kv_types.empty()) {
    if (!c.url.empty()) {
      return Status::InvalidArgument(
          "--kv-type: restarts the server with each format, "
          "so it cannot be used with --url");
    }
    if (FindFlag(c.server_args, "--kv-cache-dtype", nullptr) ||
        FindFlag(c.server_args, "--kv-type", nullptr)) {
      return Status::InvalidArgument(
          "--kv-type: sets the server's --kv-type itself; leave it "
          "out of the server arguments");
    }
    if (n_formats == 0) return Status::InvalidArgument("--kv-type: no format given");
    for (const std::string& f : SplitComma(c.kv_types)) {
      KVTIER_RETURN_IF_ERROR(ParseKvFormats("--kv-type", f).status());
    }
  }
  if (!c.sweep_contexts.empty()) {
    KVTIER_RETURN_IF_ERROR(
        ParseUintList("--sweep-contexts", c.sweep_contexts, 1, kMaxTokens).status());
  }
  return Status::OK();
}

}  // namespace

Result<BenchServeReport> RunBenchServe(const BenchServeConfig& c,
                                       const std::function<void(int, int)>& progress_fn) {
  KVTIER_RETURN_IF_ERROR(CheckConfig(c));
  signal(SIGPIPE, SIG_IGN);
  KVTIER_ASSIGN_OR_RETURN(const PromptText pt, ReadPromptText(c.text, KVTIER_SERVE_TEXT));
  const TextSource text(pt.random ? bench_serve::RandomWords(c.seed, 1 << 20) : pt.text);
  const std::string source =
      pt.random ? "seeded random words (seed " + std::to_string(c.seed) + ")" : pt.path;

  std::vector<uint32_t> contexts = {ContextOf(c)};
  if (!c.sweep_contexts.empty()) {
    KVTIER_ASSIGN_OR_RETURN(contexts,
                            ParseUintList("--sweep-contexts", c.sweep_contexts, 1, 1u << 20));
  }
  std::vector<std::string> formats = {""};
  if (!c.kv_types.empty()) formats = SplitComma(c.kv_types);
  Progress progress(progress_fn,
                    static_cast<int>(formats.size() * contexts.size()) * RequestsPerRun(c));
  std::random_device rd;
  const uint64_t run_id = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());

  BenchServeReport report;
  report.sweep = !c.sweep_contexts.empty() || formats.size() > 1;
  // One calibration for the whole invocation: the tokenizer is the same for every run (a sweep
  // restarts the same model with other KV formats).
  std::optional<bench_serve::Calibration> calibration;
  if (c.chars_per_token > 0) {
    calibration.emplace();
    calibration->chars_per_token = c.chars_per_token;
    calibration->method = "given";
  }
  for (const std::string& format : formats) {
    for (const uint32_t context : contexts) {
      BenchServeConfig rc = c;
      if (!c.sweep_contexts.empty()) {
        (c.workload == "two-round" ? rc.context_tokens : rc.history_tokens) = context;
      }
      Endpoint ep;
      ep.api = c.api;
      ep.response_format = c.response_format;
      if (c.workload == "agent") ep.tools = bench_serve::AgentTools();
      ep.timeout_s = c.timeout_s;
      std::unique_ptr<ServerChild> child;
      BenchServeRun run;
      run.workload = c.workload;
      run.context_tokens = ContextOf(rc);
      run.prompt_source = source;
      if (c.url.empty()) {
        std::vector<std::string> args = c.server_args;
        if (!c.model.empty() && !FindFlag(args, "--model", nullptr)) {
          args.insert(args.end(), {"--model", c.model});
        }
        if (!format.empty()) args.insert(args.end(), {"--kv-type", format});
        if (!FindFlag(args, "--max-model-len", nullptr)) {
          // Room for the longest request even when the chars-per-token guess is off.
          const uint32_t need = (LongestRequest(rc) * 5 / 4 + 512 + 255) / 256 * 256;
          args.insert(args.end(), {"--max-model-len", std::to_string(need)});
        }
        const uint32_t seqs = c.workload == "multiturn"           ? c.conversations
                              : c.workload == "concurrency"       ? c.clients
                              : c.workload == "batched-histories" ? c.batch
                                                                  : 1;
        if (seqs > 8 && !FindFlag(args, "--max-num-seqs", nullptr)) {
          args.insert(args.end(), {"--max-num-seqs", std::to_string(seqs)});
        }
        KVTIER_ASSIGN_OR_RETURN(child,
                                ServerChild::Start(c.server_bin, args, c.timeout_s, c.server_log));
        KVTIER_ASSIGN_OR_RETURN(const bench_serve::ParsedUrl u,
                                bench_serve::ParseUrl(child->url()));
        ep.origin = u.origin;
        ep.base = u.base;
        run.server = child->Describe();
        std::string dtype = kServeDefaultKvType;
        if (!FindFlag(args, "--kv-type", &dtype)) FindFlag(args, "--kv-cache-dtype", &dtype);
        run.kv_format = dtype;
      } else {
        KVTIER_ASSIGN_OR_RETURN(const bench_serve::ParsedUrl u, bench_serve::ParseUrl(c.url));
        ep.origin = u.origin;
        ep.base = u.base;
        ep.model = c.model;
        run.server = c.url + (c.server_pid > 0 ? " (pid " + std::to_string(c.server_pid) + ")"
                                               : std::string());
      }
      if (!calibration) {
        calibration = Calibrate(ep, text);
        const BenchServeRequest& cal = calibration->request;
        if (!calibration->measured && !cal.ok && cal.error.rfind("HTTP /", 0) == 0) {
          return Status::Unavailable("cannot reach the server: " + cal.error);
        }
        if (!calibration->measured) {
          std::fprintf(stderr,
                       "bench-serve: note: no /tokenize and no usage.prompt_tokens from the "
                       "server (%s); assuming %.1f chars per token\n",
                       cal.ok ? "no usage" : cal.error.c_str(), kDefaultCharsPerToken);
        }
      }
      run.chars_per_token = calibration->chars_per_token;
      run.calibrated = calibration->measured;
      run.calibration = calibration->method;

      bench_serve::WorkloadEnv env;
      env.c = &rc;
      env.ep = ep;
      env.text = &text;
      env.cpt = run.chars_per_token;
      env.run_id = run_id + 0x632BE59BD9B4E019ull * report.runs.size();
      env.step = [&progress] { progress.Step(); };
      MetricsPoller poller(ep, c.metrics_interval_s);
      poller.Start();
      env.t0 = Clock::now();
      run.requests = bench_serve::RunWorkload(env);
      run.wall_s = MsSince(env.t0) / 1e3;
      poller.Stop();
      run.kv_bytes = poller.Max();
      run.metrics_seen = poller.seen();
      if (run.kv_format.empty()) run.kv_format = poller.active_format();
      if (child != nullptr) {
        run.peak_rss_bytes = child->PeakRss();
        KVTIER_RETURN_IF_ERROR(child->Stop(120));
      } else if (c.server_pid > 0) {
        run.peak_rss_bytes = ReadPeakRss(c.server_pid);
      }
      report.runs.push_back(std::move(run));
    }
  }
  return report;
}

int RunBenchServeCommand(const BenchServeConfig& c, bool json_out,
                         const std::function<void(int, int)>& progress) {
  Result<BenchServeReport> r = RunBenchServe(c, progress);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier-bench serve: error: %s\n", r.status().message().c_str());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << (json_out ? FormatBenchServeJson(*r) : FormatBenchServeTable(*r)) << std::flush;
  int status = 0;
  if (!c.plots_dir.empty()) {
    std::string note;
    const Status st = WriteBenchServePlots(*r, c.plots_dir, &note);
    if (!st.ok()) {
      std::fprintf(stderr, "kvtier-bench serve: error: %s\n", st.message().c_str());
      status = 1;
    } else {
      std::fprintf(stderr, "kvtier-bench serve: %s\n", note.c_str());
    }
  }
  uint32_t failed = 0, total = 0;
  std::string first;
  for (const BenchServeRun& run : r->runs) {
    for (const BenchServeRequest& q : run.requests) {
      ++total;
      if (q.ok) continue;
      if (failed++ == 0) first = q.error;
    }
  }
  if (failed > 0) {
    std::fprintf(stderr, "kvtier-bench serve: %u of %u requests failed; the first: %s\n", failed,
                 total, first.c_str());
    status = 1;
  }
  return status;
}

}  // namespace kvtier::cli
