// FaultInjectionEnv: every fault kind gives its documented result, crashes and Restart(),
// operation counting, rules per path, a sweep of crash points over WriteFileDurably; and
// concurrent use of MemEnv and FaultInjectionEnv (run under ThreadSanitizer by CI).
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <thread>

#include "base/crc32c.h"
#include "base/env_test_util.h"
#include "kvtier/env.h"

namespace kvtier {
namespace {

using testing_env::Bytes;
using testing_env::ReadString;
using testing_env::Str;
using testing_env::TempDir;
using testing_env::WriteString;
using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;
using CrashMode = MemEnv::CrashMode;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// `fault` on every operation of kind `op`, nothing else.
FaultInjectionEnv::Rule On(Op op, Fault fault) {
  return [op, fault](Op o, uint64_t, const std::string&) { return o == op ? fault : Fault::kNone; };
}

class FaultEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(mem_->CreateDirs("/d").ok()); }
  std::unique_ptr<MemEnv> mem_ = MemEnv::Create(5);
  std::unique_ptr<FaultInjectionEnv> env_ = FaultInjectionEnv::Create(mem_.get());
};

TEST_F(FaultEnvTest, PassesThroughAndCountsEveryOperation) {
  ASSERT_TRUE(WriteString(env_.get(), "/d/a", "abc").ok());  // open, append, sync, close
  EXPECT_EQ(env_->op_count(), 4u);
  EXPECT_EQ(ReadString(env_.get(), "/d/a"), "abc");  // open, one read of size() bytes
  EXPECT_EQ(env_->op_count(), 6u);
  ASSERT_TRUE(env_->RenameFile("/d/a", "/d/b").ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  ASSERT_TRUE(env_->ListDir("/d").ok());
  ASSERT_TRUE(env_->FileSize("/d/b").ok());
  ASSERT_TRUE(env_->FreeBytes("/d").ok());
  ASSERT_TRUE(env_->CreateDirs("/d/e").ok());
  ASSERT_TRUE(env_->RemoveDir("/d/e").ok());
  ASSERT_TRUE(env_->RemoveFile("/d/b").ok());
  EXPECT_TRUE(env_->FileExists("/d"));  // not an operation
  EXPECT_EQ(env_->op_count(), 14u);
  EXPECT_EQ(env_->faults_injected(), 0u);
  EXPECT_FALSE(env_->crashed());
}

TEST_F(FaultEnvTest, EioFailsEachKindOfOperation) {
  ASSERT_TRUE(WriteString(mem_.get(), "/d/f", "content").ok());
  struct Case {
    Op op;
    std::function<Status()> call;
  };
  auto open_write = [&] { return env_->NewWritableFile("/d/w").status(); };
  auto open_read = [&] { return env_->NewRandomAccessFile("/d/f").status(); };
  std::vector<Case> cases = {
      {Op::kOpenWrite, open_write},
      {Op::kAppend, [&] { return WriteString(env_.get(), "/d/w", "x"); }},
      {Op::kSync, [&] { return WriteString(env_.get(), "/d/w", "x"); }},
      {Op::kClose, [&] { return WriteString(env_.get(), "/d/w", "x"); }},
      {Op::kOpenRead, open_read},
      {Op::kRead, [&] { return env_->ReadFile("/d/f").status(); }},
      {Op::kRename, [&] { return env_->RenameFile("/d/f", "/d/g"); }},
      {Op::kRemove, [&] { return env_->RemoveFile("/d/f"); }},
      {Op::kCreateDirs, [&] { return env_->CreateDirs("/d/x"); }},
      {Op::kRemoveDir, [&] { return env_->RemoveDir("/d"); }},
      {Op::kSyncDir, [&] { return env_->SyncDir("/d"); }},
      {Op::kList, [&] { return env_->ListDir("/d").status(); }},
      {Op::kFileSize, [&] { return env_->FileSize("/d/f").status(); }},
      {Op::kFreeBytes, [&] { return env_->FreeBytes("/d").status(); }},
      {Op::kSyncFs, [&] {
         KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<FilesystemSync> fs, env_->NewFilesystemSync("/d"));
         return fs->Sync();
       }},
  };
  uint64_t faults = 0;
  for (const Case& c : cases) {
    env_->SetRule(On(c.op, Fault::kEio));
    Status s = c.call();
    EXPECT_EQ(s.code(), StatusCode::kIOError) << static_cast<int>(c.op) << " " << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "(injected EIO)")) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "/d")) << s.ToString();
    EXPECT_EQ(env_->faults_injected(), ++faults);
  }
  env_->SetRule(nullptr);
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), "content");  // nothing reached the base
}

TEST_F(FaultEnvTest, EnospcIsResourceExhaustedAndWritesNothing) {
  auto f = env_->NewWritableFile("/d/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(Bytes("kept")).ok());
  env_->SetRule(On(Op::kAppend, Fault::kEnospc));
  Status s = (*f)->Append(Bytes("lost"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "/d/f (") || Contains(s.message(), "/d/f:"));
  EXPECT_TRUE(Contains(s.message(), "(injected ENOSPC)"));
  ASSERT_TRUE((*f)->Close().ok());
  env_->SetRule(On(Op::kOpenWrite, Fault::kEnospc));
  EXPECT_EQ(env_->NewWritableFile("/d/g").status().code(), StatusCode::kResourceExhausted);
  env_->SetRule(On(Op::kRead, Fault::kEnospc));  // a read cannot run out of space: EIO
  EXPECT_EQ(env_->ReadFile("/d/f").status().code(), StatusCode::kIOError);
  env_->SetRule(nullptr);
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), "kept");
  EXPECT_EQ(env_->faults_injected(), 3u);
}

TEST_F(FaultEnvTest, TornWriteLeavesAStrictPrefix) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
  for (int trial = 0; trial < 20; ++trial) {
    env_->SetRule(nullptr);
    auto f = env_->NewWritableFile("/d/f");
    ASSERT_TRUE(f.ok());
    env_->SetRule(On(Op::kAppend, Fault::kTornWrite));
    Status s = (*f)->Append(Bytes(data));
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_TRUE(Contains(s.message(), "(injected torn write)")) << s.ToString();
    env_->SetRule(nullptr);
    ASSERT_TRUE((*f)->Close().ok());
    const std::string got = ReadString(env_.get(), "/d/f");
    ASSERT_LT(got.size(), data.size());
    ASSERT_EQ(got, data.substr(0, got.size()));
  }
}

int DifferingBits(const std::string& a, const std::string& b) {
  int bits = 0;
  for (size_t i = 0; i < a.size(); ++i) bits += std::popcount(static_cast<unsigned>(
      static_cast<uint8_t>(a[i]) ^ static_cast<uint8_t>(b[i])));
  return bits;
}

TEST_F(FaultEnvTest, BitFlipOnReadAndOnAppendChangesExactlyOneBit) {
  const std::string data(4096, 'q');
  const uint32_t crc = Crc32c(Bytes(data));
  ASSERT_TRUE(WriteString(env_.get(), "/d/f", data).ok());
  env_->SetRule(On(Op::kRead, Fault::kBitFlip));
  Result<std::vector<uint8_t>> got = env_->ReadFile("/d/f");
  ASSERT_TRUE(got.ok());  // a bit flip is silent...
  ASSERT_EQ(got->size(), data.size());
  EXPECT_EQ(DifferingBits(Str(*got), data), 1);
  EXPECT_NE(Crc32c(*got), crc);  // ...until a checksum looks
  env_->SetRule(nullptr);
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), data);  // the stored bytes are intact

  env_->SetRule(On(Op::kAppend, Fault::kBitFlip));
  ASSERT_TRUE(WriteString(env_.get(), "/d/g", data).ok());
  env_->SetRule(nullptr);
  const std::string stored = ReadString(env_.get(), "/d/g");
  ASSERT_EQ(stored.size(), data.size());
  EXPECT_EQ(DifferingBits(stored, data), 1);
  // On an operation that moves no bytes it does nothing.
  env_->SetRule(On(Op::kSync, Fault::kBitFlip));
  const uint64_t before = env_->faults_injected();
  ASSERT_TRUE(WriteString(env_.get(), "/d/h", "x").ok());
  EXPECT_EQ(env_->faults_injected(), before);
}

TEST_F(FaultEnvTest, CrashFailsEverythingUntilRestart) {
  ASSERT_TRUE(WriteString(env_.get(), "/d/durable", "safe").ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  auto f = env_->NewWritableFile("/d/volatile");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(Bytes("maybe")).ok());
  const uint64_t crash_at = env_->op_count() + 1;
  env_->SetRule([crash_at](Op, uint64_t i, const std::string&) {
    return i == crash_at ? Fault::kCrash : Fault::kNone;
  });
  ASSERT_TRUE((*f)->Sync().ok());       // op crash_at - 1
  Status s = env_->SyncDir("/d");       // op crash_at: the crash
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_TRUE(Contains(s.message(), "crashed")) << s.ToString();
  EXPECT_TRUE(env_->crashed());
  EXPECT_TRUE(Contains(env_->ReadFile("/d/durable").status().message(), "crashed"));
  EXPECT_FALSE((*f)->Append(Bytes("x")).ok());
  EXPECT_FALSE(env_->FileExists("/d/durable"));
  EXPECT_EQ(env_->faults_injected(), 1u);  // later failures are not new faults

  env_->Restart(CrashMode::kDropUnsynced);
  EXPECT_FALSE(env_->crashed());
  EXPECT_EQ(mem_->crash_count(), 1u);
  EXPECT_EQ(ReadString(env_.get(), "/d/durable"), "safe");
  EXPECT_FALSE(env_->FileExists("/d/volatile"));  // its entry was never dir-synced
  EXPECT_EQ((*f)->Append(Bytes("x")).code(), StatusCode::kIOError);  // an old handle
}

// A failed or crashed syncfs makes nothing durable; one that succeeds makes everything
// durable; opening the handle is a kOpenRead; a handle of an earlier epoch fails.
TEST_F(FaultEnvTest, FilesystemSyncFaultsMakeNothingDurable) {
  for (Fault fault : {Fault::kEio, Fault::kEnospc, Fault::kCrash}) {
    env_->Restart(CrashMode::kDropUnsynced);
    env_->SetRule(nullptr);
    auto fs = env_->NewFilesystemSync("/d");
    ASSERT_TRUE(fs.ok());
    ASSERT_TRUE(WriteString(env_.get(), "/d/f", "unsynced", /*sync=*/false).ok());
    env_->SetRule(On(Op::kSyncFs, fault));
    Status s = (*fs)->Sync();
    EXPECT_EQ(s.code(), fault == Fault::kEnospc ? StatusCode::kResourceExhausted
                                                : StatusCode::kIOError) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), "syncfs /d")) << s.ToString();
    env_->SetRule(nullptr);
    EXPECT_EQ(env_->crashed(), fault == Fault::kCrash);
    env_->Restart(CrashMode::kDropUnsynced);
    EXPECT_FALSE(env_->FileExists("/d/f")) << static_cast<int>(fault);
  }
  auto fs = env_->NewFilesystemSync("/d");
  ASSERT_TRUE(fs.ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/g", "synced by syncfs", /*sync=*/false).ok());
  ASSERT_TRUE((*fs)->Sync().ok());
  env_->Restart(CrashMode::kTornGarbage);
  EXPECT_EQ(ReadString(env_.get(), "/d/g"), "synced by syncfs");
  EXPECT_EQ((*fs)->Sync().code(), StatusCode::kIOError);  // opened before the restart
  env_->SetRule(On(Op::kOpenRead, Fault::kEio));
  EXPECT_EQ(env_->NewFilesystemSync("/d").status().code(), StatusCode::kIOError);
}

TEST(FaultEnvPosix, WrapsTheRealFilesystem) {
  TempDir dir;
  auto env = FaultInjectionEnv::Create(Env::Default());
  const std::string path = dir.path() + "/f";
  ASSERT_TRUE(WriteString(env.get(), path, "posix").ok());
  env->SetRule(On(Op::kSync, Fault::kEio));  // a failed fsync
  Status s = WriteString(env.get(), path, "again");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_TRUE(Contains(s.message(), path)) << s.ToString();
  env->SetRule([](Op, uint64_t, const std::string&) { return Fault::kCrash; });
  auto f = env->NewWritableFile(dir.path() + "/g");
  EXPECT_FALSE(f.ok());
  EXPECT_TRUE(env->crashed());
  env->SetRule(nullptr);
  env->Restart(CrashMode::kDropUnsynced);  // no MemEnv below: just clears the crash
  EXPECT_EQ(ReadString(env.get(), path), "again");  // bytes were written, only the sync failed
}

TEST_F(FaultEnvTest, RulesCanTargetPaths) {
  env_->SetRule([](Op op, uint64_t, const std::string& path) {
    return path.ends_with(".tmp") && op == Op::kSync ? Fault::kEio : Fault::kNone;
  });
  ASSERT_TRUE(env_->WriteFileDurably("/d/x", Bytes("old")).code() == StatusCode::kIOError);
  EXPECT_FALSE(env_->FileExists("/d/x"));
  EXPECT_FALSE(env_->FileExists("/d/x.tmp"));  // the temporary was cleaned up
  ASSERT_TRUE(WriteString(env_.get(), "/d/plain", "ok").ok());  // other paths are fine
}

// Every crash point of three WriteFileDurably calls, each crash mode: after Restart each file
// is absent, its previous version or its new version, never a torn mix; OK means durable.
TEST_F(FaultEnvTest, CrashPointSweepOverWriteFileDurably) {
  const std::string versions[3] = {"first version", "a second, longer version of the file",
                                   "3"};
  int crashes = 0;
  for (CrashMode mode : {CrashMode::kDropUnsynced, CrashMode::kTornPrefix,
                         CrashMode::kTornGarbage}) {
    for (uint64_t point = 0; point < 40; ++point) {
      auto mem = MemEnv::Create(point);
      ASSERT_TRUE(mem->CreateDirs("/s").ok());
      auto env = FaultInjectionEnv::Create(mem.get());
      env->SetRule([point](Op, uint64_t i, const std::string&) {
        return i == point ? Fault::kCrash : Fault::kNone;
      });
      int published = -1;  // the last version whose WriteFileDurably returned OK
      for (int v = 0; v < 3; ++v) {
        if (env->WriteFileDurably("/s/file", Bytes(versions[v])).ok()) published = v;
      }
      if (env->crashed()) ++crashes;
      env->SetRule(nullptr);
      env->Restart(mode);
      const std::string got = ReadString(env.get(), "/s/file");
      if (published >= 0) {
        ASSERT_TRUE(got == versions[published] || (published < 2 && got == versions[published + 1]))
            << point << ": " << got;
      } else {
        ASSERT_TRUE(got.starts_with("<NotFound") || got == versions[0]) << point << ": " << got;
      }
    }
  }
  EXPECT_GT(crashes, 30);
}

// Several threads writing, syncing, renaming and listing distinct files at once.
TEST(EnvConcurrency, ThreadsWritingDistinctFiles) {
  auto mem = MemEnv::Create(11);
  ASSERT_TRUE(mem->CreateDirs("/c").ok());
  auto fault = FaultInjectionEnv::Create(mem.get());
  std::atomic<uint64_t> rule_calls{0};
  fault->SetRule([&rule_calls](Op, uint64_t, const std::string&) {
    rule_calls.fetch_add(1, std::memory_order_relaxed);
    return Fault::kNone;
  });
  constexpr int kThreads = 6, kFiles = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Env* env = t % 2 == 0 ? static_cast<Env*>(mem.get()) : fault.get();
      for (int i = 0; i < kFiles; ++i) {
        const std::string name = "/c/t" + std::to_string(t) + "_" + std::to_string(i);
        const std::string content(100 + i, static_cast<char>('a' + t));
        if (!env->WriteFileDurably(name, Bytes(content)).ok()) failures.fetch_add(1);
        if (ReadString(env, name) != content) failures.fetch_add(1);
        if (!env->ListDir("/c").ok()) failures.fetch_add(1);
        (void)mem->TotalBytes();
        if (i % 5 == 0 && !env->RemoveFile(name).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto list = mem->ListDir("/c");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), static_cast<size_t>(kThreads * (kFiles - kFiles / 5)));
  EXPECT_EQ(rule_calls.load(), fault->op_count());
  mem->SimulateCrash(CrashMode::kTornGarbage);  // everything was published durably
  EXPECT_EQ(mem->ListDir("/c")->size(), list->size());
}

}  // namespace
}  // namespace kvtier
