// Env conformance (the same suite over PosixEnv in a fresh /tmp directory and over MemEnv)
// and MemEnv's durability model: what survives SimulateCrash() in each mode, capacity.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "base/env_test_util.h"
#include "kvtier/env.h"

namespace kvtier {
namespace {

using testing_env::Bytes;
using testing_env::ReadString;
using testing_env::Str;
using testing_env::TempDir;
using testing_env::WriteString;
using CrashMode = MemEnv::CrashMode;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class EnvConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      tmp_ = std::make_unique<TempDir>();
      env_ = Env::Default();
      root_ = tmp_->path();
    } else {
      mem_ = MemEnv::Create(1);
      env_ = mem_.get();
      root_ = "/data/env_test";
      ASSERT_TRUE(env_->CreateDirs(root_).ok());
    }
  }
  std::string P(const std::string& name) const { return root_ + "/" + name; }

  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<MemEnv> mem_;
  Env* env_ = nullptr;
  std::string root_;
};

TEST_P(EnvConformance, CreateAppendRead) {
  auto f = env_->NewWritableFile(P("a"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Append(Bytes("hello")).ok());
  ASSERT_TRUE((*f)->Append(Bytes("")).ok());
  ASSERT_TRUE((*f)->Append(Bytes(" world")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE((*f)->Close().ok());  // twice is fine
  EXPECT_FALSE((*f)->Append(Bytes("x")).ok());
  EXPECT_FALSE((*f)->Sync().ok());

  EXPECT_EQ(ReadString(env_, P("a")), "hello world");
  Result<uint64_t> size = env_->FileSize(P("a"));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 11u);
  auto r = env_->NewRandomAccessFile(P("a"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->size(), 11u);
  char buf[64] = {};
  Result<size_t> got = (*r)->Read(6, sizeof buf, reinterpret_cast<uint8_t*>(buf));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::string(buf, *got), "world");
  got = (*r)->Read(0, 4, reinterpret_cast<uint8_t*>(buf));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::string(buf, *got), "hell");
  for (uint64_t off : {11u, 12u, 1000u}) {
    got = (*r)->Read(off, 8, reinterpret_cast<uint8_t*>(buf));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0u);
  }
}

TEST_P(EnvConformance, StartSyncIsAHintBeforeSync) {
  auto f = env_->NewWritableFile(P("s"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Append(Bytes("started ")).ok());
  Status s = (*f)->StartSync();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((*f)->Append(Bytes("then synced")).ok());
  ASSERT_TRUE((*f)->StartSync().ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  if (GetParam() == "posix") {
    EXPECT_FALSE((*f)->StartSync().ok());  // closed
  }
  EXPECT_EQ(ReadString(env_, P("s")), "started then synced");
}

TEST_P(EnvConformance, ManyAppendSizesReadBackExactly) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> want;
  auto f = env_->NewWritableFile(P("big"));
  ASSERT_TRUE(f.ok());
  for (size_t n : {1u, 100u, 70000u, 3u, 65536u, 65535u, 1u << 20, 0u, 17u, 200000u}) {
    std::vector<uint8_t> chunk(n);
    for (auto& b : chunk) b = static_cast<uint8_t>(rng());
    ASSERT_TRUE((*f)->Append(chunk).ok());
    want.insert(want.end(), chunk.begin(), chunk.end());
  }
  ASSERT_TRUE((*f)->Close().ok());
  Result<std::vector<uint8_t>> got = env_->ReadFile(P("big"));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == want);
  ASSERT_TRUE(WriteString(env_, P("empty"), "").ok());
  EXPECT_EQ(ReadString(env_, P("empty")), "");
}

TEST_P(EnvConformance, NewWritableFileTruncates) {
  ASSERT_TRUE(WriteString(env_, P("t"), "long old content").ok());
  ASSERT_TRUE(WriteString(env_, P("t"), "new").ok());
  EXPECT_EQ(ReadString(env_, P("t")), "new");
}

TEST_P(EnvConformance, RenameReplacesAndRemoveDeletes) {
  ASSERT_TRUE(WriteString(env_, P("from"), "F").ok());
  ASSERT_TRUE(WriteString(env_, P("to"), "T").ok());
  ASSERT_TRUE(env_->RenameFile(P("from"), P("to")).ok());
  EXPECT_FALSE(env_->FileExists(P("from")));
  EXPECT_TRUE(env_->FileExists(P("to")));
  EXPECT_EQ(ReadString(env_, P("to")), "F");

  Status s = env_->RenameFile(P("from"), P("x"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), P("from"))) << s.ToString();

  ASSERT_TRUE(env_->RemoveFile(P("to")).ok());
  EXPECT_FALSE(env_->FileExists(P("to")));
  s = env_->RemoveFile(P("to"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), P("to"))) << s.ToString();
}

TEST_P(EnvConformance, ListDirAndSizes) {
  ASSERT_TRUE(WriteString(env_, P("one"), "1").ok());
  ASSERT_TRUE(WriteString(env_, P("three"), "333").ok());
  ASSERT_TRUE(env_->CreateDirs(P("sub")).ok());
  auto list = env_->ListDir(root_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  std::sort(list->begin(), list->end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "one");
  EXPECT_FALSE((*list)[0].is_dir);
  EXPECT_EQ((*list)[0].size, 1u);
  EXPECT_EQ((*list)[1].name, "sub");
  EXPECT_TRUE((*list)[1].is_dir);
  EXPECT_EQ((*list)[2].name, "three");
  EXPECT_EQ((*list)[2].size, 3u);
  auto empty = env_->ListDir(P("sub"));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto missing = env_->ListDir(P("nope"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), P("nope")));
}

TEST_P(EnvConformance, CreateDirsAndRemoveDir) {
  ASSERT_TRUE(env_->CreateDirs(P("a/b/c")).ok());
  EXPECT_TRUE(env_->CreateDirs(P("a/b/c")).ok());   // exists: OK
  EXPECT_TRUE(env_->CreateDirs(P("a/b/c/")).ok());  // trailing '/'
  EXPECT_TRUE(env_->FileExists(P("a/b")));
  ASSERT_TRUE(WriteString(env_, P("a/b/c/f"), "x").ok());
  EXPECT_EQ(ReadString(env_, P("a/b/c/f")), "x");

  ASSERT_TRUE(WriteString(env_, P("file"), "x").ok());
  Status s = env_->CreateDirs(P("file/d"));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), P("file"))) << s.ToString();

  s = env_->RemoveDir(P("a/b/c"));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();  // not empty
  EXPECT_TRUE(Contains(s.message(), P("a/b/c"))) << s.ToString();
  ASSERT_TRUE(env_->RemoveFile(P("a/b/c/f")).ok());
  ASSERT_TRUE(env_->RemoveDir(P("a/b/c")).ok());
  EXPECT_FALSE(env_->FileExists(P("a/b/c")));
  EXPECT_EQ(env_->RemoveDir(P("a/b/c")).code(), StatusCode::kNotFound);
  EXPECT_FALSE(env_->RemoveDir(P("file")).ok());
  EXPECT_FALSE(env_->RemoveFile(P("a/b")).ok());  // a directory
}

TEST_P(EnvConformance, ErrorsNameThePath) {
  auto r = env_->NewRandomAccessFile(P("missing"));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(r.status().message(), P("missing"))) << r.status().ToString();
  auto w = env_->NewWritableFile(P("no/such/dir/f"));
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(w.status().message(), P("no/such/dir/f"))) << w.status().ToString();
  auto size = env_->FileSize(P("missing"));
  EXPECT_EQ(size.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(size.status().message(), P("missing")));
  auto read = env_->ReadFile(P("missing"));
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  Status s = env_->SyncDir(P("missing"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), P("missing")));
  ASSERT_TRUE(env_->CreateDirs(P("d")).ok());
  EXPECT_FALSE(env_->FileSize(P("d")).ok());
  EXPECT_FALSE(env_->NewWritableFile(P("d")).ok());
  EXPECT_FALSE(env_->NewRandomAccessFile(P("d")).ok());
  EXPECT_FALSE(env_->FileExists(P("missing")));
}

TEST_P(EnvConformance, SyncDirFreeBytesAndWriteFileDurably) {
  EXPECT_TRUE(env_->SyncDir(root_).ok());
  auto free_bytes = env_->FreeBytes(root_);
  ASSERT_TRUE(free_bytes.ok()) << free_bytes.status().ToString();
  EXPECT_GT(*free_bytes, 0u);
  EXPECT_FALSE(env_->FreeBytes(P("missing/x")).ok());

  ASSERT_TRUE(env_->WriteFileDurably(P("d.bin"), Bytes("v1")).ok());
  ASSERT_TRUE(env_->WriteFileDurably(P("d.bin"), Bytes("version two")).ok());
  EXPECT_EQ(ReadString(env_, P("d.bin")), "version two");
  EXPECT_FALSE(env_->FileExists(P("d.bin.tmp")));
  Status s = env_->WriteFileDurably(P("nodir/x"), Bytes("x"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

TEST_P(EnvConformance, FilesystemSyncOfADirectory) {
  ASSERT_TRUE(WriteString(env_, P("a.tmp"), "bytes", /*sync=*/false).ok());
  auto fs = env_->NewFilesystemSync(root_);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  EXPECT_TRUE((*fs)->Sync().ok());
  ASSERT_TRUE(env_->RenameFile(P("a.tmp"), P("a")).ok());
  EXPECT_TRUE((*fs)->Sync().ok());  // a handle syncs as often as asked
  EXPECT_EQ(ReadString(env_, P("a")), "bytes");
  EXPECT_EQ(env_->NewFilesystemSync(P("missing")).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(env_->NewFilesystemSync(P("a")).ok());  // a file, not a directory
}

INSTANTIATE_TEST_SUITE_P(Envs, EnvConformance, ::testing::Values("posix", "mem"),
                         [](const auto& info) { return info.param; });

TEST(PosixEnv, DefaultIsOneInstanceAndRelativeParentWorks) {
  EXPECT_EQ(Env::Default(), Env::Default());
  TempDir dir;
  ASSERT_TRUE(Env::Default()->CreateDirs(dir.path() + "/x//y/").ok());
  EXPECT_TRUE(Env::Default()->FileExists(dir.path() + "/x/y"));
}

// ---- MemEnv: the durability model ----

constexpr CrashMode kModes[] = {CrashMode::kDropUnsynced, CrashMode::kTornPrefix,
                                CrashMode::kTornGarbage};

class MemEnvCrash : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_->CreateDirs("/d").ok()); }

  // A fresh MemEnv of `seed` whose /d/f holds `synced` (file synced) then `unsynced` (appended
  // after the sync; the directory synced), ready for a torn crash.
  static void WriteSyncedThenUnsynced(uint64_t seed, const std::string& synced,
                                      const std::string& unsynced, std::unique_ptr<MemEnv>* out) {
    *out = MemEnv::Create(seed);
    MemEnv* env = out->get();
    ASSERT_TRUE(env->CreateDirs("/d").ok());
    auto f = env->NewWritableFile("/d/f");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(Bytes(synced)).ok());
    ASSERT_TRUE((*f)->Sync().ok());
    ASSERT_TRUE((*f)->Append(Bytes(unsynced)).ok());
    ASSERT_TRUE(env->SyncDir("/d").ok());
  }

  std::unique_ptr<MemEnv> env_ = MemEnv::Create(42);
};

TEST_F(MemEnvCrash, SyncedAndDirSyncedFilesSurviveIntact) {
  for (CrashMode mode : kModes) {
    ASSERT_TRUE(WriteString(env_.get(), "/d/kept", "durable bytes").ok());
    ASSERT_TRUE(env_->SyncDir("/d").ok());
    env_->SimulateCrash(mode);
    EXPECT_EQ(ReadString(env_.get(), "/d/kept"), "durable bytes");
  }
  EXPECT_EQ(env_->crash_count(), 3u);
}

TEST_F(MemEnvCrash, UnsyncedBytesAndEntriesAreDropped) {
  auto f = env_->NewWritableFile("/d/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(Bytes("synced|")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Append(Bytes("unsynced")).ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/never_dir_synced", "data", /*sync=*/true).ok());
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), "synced|unsynced");
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), "synced|");
  EXPECT_FALSE(env_->FileExists("/d/never_dir_synced"));
  EXPECT_EQ(env_->TotalBytes(), 7u);
}

TEST_F(MemEnvCrash, StartSyncMakesNothingDurable) {
  auto f = env_->NewWritableFile("/d/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(Bytes("synced|")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Append(Bytes("started")).ok());
  ASSERT_TRUE((*f)->StartSync().ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_EQ(ReadString(env_.get(), "/d/f"), "synced|");
}

TEST_F(MemEnvCrash, FilesystemSyncMakesEveryFileAndEveryDirectoryDurable) {
  ASSERT_TRUE(env_->CreateDirs("/e/sub").ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/old", "old", /*sync=*/true).ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  auto fs = env_->NewFilesystemSync("/d");
  ASSERT_TRUE(fs.ok());
  auto open = env_->NewWritableFile("/e/sub/open");  // still open at the sync
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE((*open)->Append(Bytes("open bytes")).ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/a.tmp", "renamed", /*sync=*/false).ok());
  ASSERT_TRUE(env_->RenameFile("/d/a.tmp", "/d/a").ok());
  ASSERT_TRUE(env_->RemoveFile("/d/old").ok());
  ASSERT_TRUE(WriteString(env_.get(), "/e/b", "other dir", /*sync=*/false).ok());
  ASSERT_TRUE((*fs)->Sync().ok());
  ASSERT_TRUE((*open)->Append(Bytes(" after")).ok());  // after the sync: not durable
  ASSERT_TRUE(WriteString(env_.get(), "/d/late", "late", /*sync=*/true).ok());
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_EQ(ReadString(env_.get(), "/d/a"), "renamed");
  EXPECT_FALSE(env_->FileExists("/d/a.tmp"));
  EXPECT_FALSE(env_->FileExists("/d/old"));
  EXPECT_EQ(ReadString(env_.get(), "/e/b"), "other dir");
  EXPECT_EQ(ReadString(env_.get(), "/e/sub/open"), "open bytes");
  EXPECT_FALSE(env_->FileExists("/d/late"));  // created after the sync, never dir-synced
  EXPECT_EQ((*fs)->Sync().code(), StatusCode::kIOError);  // a handle of the old boot
}

TEST_F(MemEnvCrash, TornPrefixKeepsAPrefixOfWhatWasWritten) {
  const std::string synced = "0123456789";
  const std::string unsynced = "abcdefghijklmnopqrstuvwxyz";
  std::set<size_t> lengths;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::unique_ptr<MemEnv> env;
    ASSERT_NO_FATAL_FAILURE(WriteSyncedThenUnsynced(seed, synced, unsynced, &env));
    env->SimulateCrash(CrashMode::kTornPrefix);
    const std::string got = ReadString(env.get(), "/d/f");
    const std::string all = synced + unsynced;
    ASSERT_GE(got.size(), synced.size());
    ASSERT_EQ(got, all.substr(0, got.size())) << seed;
    lengths.insert(got.size());
    env->SimulateCrash(CrashMode::kTornPrefix);  // what survived a crash is durable
    ASSERT_EQ(ReadString(env.get(), "/d/f"), got);
  }
  EXPECT_TRUE(lengths.count(synced.size()) && lengths.count(synced.size() + unsynced.size()));
  EXPECT_GT(lengths.size(), 10u);  // really torn at many places
}

TEST_F(MemEnvCrash, TornGarbageKeepsSyncedBytesAndMayScrambleTheRest) {
  const std::string synced(100, 's');
  const std::string unsynced(1000, 'u');
  int scrambled = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    std::unique_ptr<MemEnv> env;
    ASSERT_NO_FATAL_FAILURE(WriteSyncedThenUnsynced(seed, synced, unsynced, &env));
    env->SimulateCrash(CrashMode::kTornGarbage);
    const std::string got = ReadString(env.get(), "/d/f");
    ASSERT_GE(got.size(), synced.size());
    ASSERT_LE(got.size(), synced.size() + unsynced.size());
    ASSERT_EQ(got.substr(0, synced.size()), synced);
    if (got.substr(synced.size()) != unsynced.substr(0, got.size() - synced.size())) ++scrambled;
  }
  EXPECT_GT(scrambled, 10);
}

TEST_F(MemEnvCrash, DirectoryChangesWithoutSyncDirAreUndone) {
  ASSERT_TRUE(WriteString(env_.get(), "/d/x", "old").ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/gone", "still here").ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/x.tmp", "new").ok());
  ASSERT_TRUE(env_->RenameFile("/d/x.tmp", "/d/x").ok());
  ASSERT_TRUE(env_->RemoveFile("/d/gone").ok());
  EXPECT_EQ(ReadString(env_.get(), "/d/x"), "new");
  env_->SimulateCrash(CrashMode::kTornPrefix);
  EXPECT_EQ(ReadString(env_.get(), "/d/x"), "old");
  EXPECT_FALSE(env_->FileExists("/d/x.tmp"));  // its creation was never made durable
  EXPECT_EQ(ReadString(env_.get(), "/d/gone"), "still here");

  // The same sequence with SyncDir is kept.
  ASSERT_TRUE(WriteString(env_.get(), "/d/x.tmp", "new").ok());
  ASSERT_TRUE(env_->RenameFile("/d/x.tmp", "/d/x").ok());
  ASSERT_TRUE(env_->RemoveFile("/d/gone").ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  env_->SimulateCrash(CrashMode::kTornPrefix);
  EXPECT_EQ(ReadString(env_.get(), "/d/x"), "new");
  EXPECT_FALSE(env_->FileExists("/d/gone"));
  EXPECT_FALSE(env_->FileExists("/d/x.tmp"));
}

TEST_F(MemEnvCrash, CreatedDirectoriesAreDurable) {
  ASSERT_TRUE(env_->CreateDirs("/d/a/b").ok());
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_TRUE(env_->FileExists("/d/a/b"));
  ASSERT_TRUE(env_->RemoveDir("/d/a/b").ok());  // an unsynced removal comes back
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_TRUE(env_->FileExists("/d/a/b"));
}

TEST_F(MemEnvCrash, FileObjectsOfAnEarlierBootFail) {
  ASSERT_TRUE(WriteString(env_.get(), "/d/r", "read me").ok());
  ASSERT_TRUE(env_->SyncDir("/d").ok());
  auto w = env_->NewWritableFile("/d/w");
  ASSERT_TRUE(w.ok());
  auto r = env_->NewRandomAccessFile("/d/r");
  ASSERT_TRUE(r.ok());
  env_->SimulateCrash(CrashMode::kDropUnsynced);
  EXPECT_EQ((*w)->Append(Bytes("x")).code(), StatusCode::kIOError);
  EXPECT_EQ((*w)->Sync().code(), StatusCode::kIOError);
  uint8_t buf[8];
  Result<size_t> got = (*r)->Read(0, sizeof buf, buf);
  EXPECT_EQ(got.status().code(), StatusCode::kIOError);
  EXPECT_TRUE(Contains(got.status().message(), "/d/r"));
  EXPECT_EQ(ReadString(env_.get(), "/d/r"), "read me");  // new handles work
}

TEST_F(MemEnvCrash, WriteFileDurablySurvivesAnyCrash) {
  for (CrashMode mode : kModes) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      auto env = MemEnv::Create(seed);
      ASSERT_TRUE(env->CreateDirs("/t/blocks").ok());
      ASSERT_TRUE(env->WriteFileDurably("/t/blocks/b1", Bytes("payload one")).ok());
      ASSERT_TRUE(WriteString(env.get(), "/t/blocks/b2", "not published", false).ok());
      env->SimulateCrash(mode);
      ASSERT_EQ(ReadString(env.get(), "/t/blocks/b1"), "payload one");
      ASSERT_FALSE(env->FileExists("/t/blocks/b1.tmp"));
      ASSERT_FALSE(env->FileExists("/t/blocks/b2"));
    }
  }
}

TEST_F(MemEnvCrash, SameSeedSameCrash) {
  std::string results[2];
  for (std::string& out : results) {
    auto env = MemEnv::Create(9);
    ASSERT_TRUE(env->CreateDirs("/d").ok());
    for (int i = 0; i < 10; ++i) {
      const std::string path = "/d/f" + std::to_string(i);
      ASSERT_TRUE(WriteString(env.get(), path, std::string(100 + i, 'a' + i), false).ok());
    }
    ASSERT_TRUE(env->SyncDir("/d").ok());
    env->SimulateCrash(CrashMode::kTornGarbage);
    for (int i = 0; i < 10; ++i) out += ReadString(env.get(), "/d/f" + std::to_string(i)) + "|";
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(MemEnvCrash, CapacityGivesResourceExhausted) {
  env_->SetCapacity(100);
  auto f = env_->NewWritableFile("/d/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(std::vector<uint8_t>(60, 1)).ok());
  EXPECT_EQ(env_->TotalBytes(), 60u);
  Result<uint64_t> free_bytes = env_->FreeBytes("/d");
  ASSERT_TRUE(free_bytes.ok());
  EXPECT_EQ(*free_bytes, 40u);
  Status s = (*f)->Append(std::vector<uint8_t>(50, 2));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "/d/f")) << s.ToString();
  EXPECT_EQ(env_->TotalBytes(), 60u);  // nothing written
  ASSERT_TRUE((*f)->Append(std::vector<uint8_t>(40, 3)).ok());
  EXPECT_EQ(*env_->FreeBytes("/d"), 0u);
  ASSERT_TRUE((*f)->Close().ok());
  // Overwriting by rename and removing give the space back.
  ASSERT_TRUE(env_->RenameFile("/d/f", "/d/g").ok());
  EXPECT_EQ(env_->TotalBytes(), 100u);
  ASSERT_TRUE(env_->RemoveFile("/d/g").ok());
  EXPECT_EQ(env_->TotalBytes(), 0u);
  EXPECT_EQ(*env_->FreeBytes("/d"), 100u);
  env_->SetCapacity(~uint64_t{0});
  EXPECT_EQ(*env_->FreeBytes("/"), ~uint64_t{0});
}

TEST_F(MemEnvCrash, TotalBytesFollowsRenamesOverwritesAndCrashes) {
  ASSERT_TRUE(WriteString(env_.get(), "/d/a", std::string(10, 'a')).ok());
  ASSERT_TRUE(WriteString(env_.get(), "/d/b", std::string(30, 'b')).ok());
  EXPECT_EQ(env_->TotalBytes(), 40u);
  ASSERT_TRUE(env_->RenameFile("/d/a", "/d/b").ok());
  EXPECT_EQ(env_->TotalBytes(), 10u);
  ASSERT_TRUE(WriteString(env_.get(), "/d/b", "xyz").ok());  // truncate + write
  EXPECT_EQ(env_->TotalBytes(), 3u);
  env_->SimulateCrash(CrashMode::kDropUnsynced);  // nothing was dir-synced
  EXPECT_EQ(env_->TotalBytes(), 0u);
}

TEST(MemEnv, PathsAreNormalized) {
  auto env = MemEnv::Create();
  ASSERT_TRUE(env->CreateDirs("a/./b").ok());
  ASSERT_TRUE(WriteString(env.get(), "/a/b/../b//f", "x").ok());
  EXPECT_EQ(ReadString(env.get(), "a/b/f"), "x");
  EXPECT_EQ(env->CreateDirs("").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(env->FileExists("/"));
  EXPECT_FALSE(env->RemoveDir("/").ok());
  EXPECT_EQ(env->RenameFile("/a", "/a/b/c").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
