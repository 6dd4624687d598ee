// The abuse suite's SSD tier case (ctest label `abuse`, issue 36), on the real filesystem: a
// planted fffffffffffffffe.kvs and other foreign names among valid segments, then 200 spills;
// no pre-existing segment changes a byte, and Stats() equals what `du` would count for the
// tier's own segment files. Bounded: a few MB in a temporary directory, seconds.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "base/crc32c.h"
#include "kvtier/ssd_tier.h"
#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::Entries;
using testing::MakeRig;
using testing::Rig;
using testing::StoreAndSpill;

std::map<std::string, uint32_t> Checksums(const std::string& dir) {
  std::map<std::string, uint32_t> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out[e.path().filename()] = Crc32c(Env::Default()->ReadFile(e.path()).value());
  }
  return out;
}

TEST(SsdTierAbuse, PlantedSegmentNamesThen200SpillsOverwriteNothing) {
  char tmpl[] = "/tmp/kvtier_abuse_tier_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl, seg = root + "/segments";
  SsdTierOptions o = testing::TierOptions(Env::Default(), 1ull << 30, 64);
  o.dir = root;
  o.layout = SsdLayout::kSegments;
  o.writer_threads = 1;
  o.batch_blocks = 4;
  {
    Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    StoreAndSpill(r, Entries(40, 0, 3));
  }
  const std::vector<uint8_t> junk(4096, 0x5a);
  for (const char* n : {"fffffffffffffffe.kvs", "ffffffffffffffff.kvs", "README.kvs",
                        "00000000000000ff.kvs.orig", "g000000000000000.kvs"}) {
    ASSERT_TRUE(Env::Default()->WriteFileDurably(seg + "/" + n, junk).ok());
  }
  const std::map<std::string, uint32_t> before = Checksums(seg);
  Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  for (int i = 0; i < 200; ++i) StoreAndSpill(r, Entries(1, 100000 + 1000 * i, 10 + i));
  const std::map<std::string, uint32_t> after = Checksums(seg);
  int kept = 0;
  for (const auto& [name, crc] : before) {
    if (name.starts_with("ffffffffffffff")) continue;  // garbage: quarantined at open
    ASSERT_TRUE(after.contains(name)) << name;
    EXPECT_EQ(after.at(name), crc) << name << " was overwritten";
    ++kept;
  }
  EXPECT_GE(kept, 10);
  // du of the tier's own files (16 hex digits + .kvs; the foreign names stay, uncounted).
  uint64_t du = 0, files = 0;
  for (const auto& [name, crc] : after) {
    if (name.size() != 20 || !name.ends_with(".kvs") ||
        name.find_first_not_of("0123456789abcdef") != 16) {
      continue;
    }
    struct stat st{};
    ASSERT_EQ(::stat((seg + "/" + name).c_str(), &st), 0);
    du += static_cast<uint64_t>(st.st_size);
    ++files;
    EXPECT_FALSE(name.starts_with("ffff")) << name;
  }
  const SsdTierStats s = r.tier->Stats();
  EXPECT_EQ(s.bytes, du);
  EXPECT_EQ(s.files, files);
  EXPECT_EQ(s.quarantined, 2u);
  std::printf("[abuse] tier: %d pre-existing segments unchanged after 200 spills; stats %llu "
              "bytes in %llu files == du %llu bytes\n",
              kept, static_cast<unsigned long long>(s.bytes),
              static_cast<unsigned long long>(s.files), static_cast<unsigned long long>(du));
  r = Rig{};
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace kvtier
