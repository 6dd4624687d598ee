// A process spilling KV blocks to the SSD tier is killed with SIGKILL in the middle of it; a
// new process over the same directory serves the cached prompts with greedy output identical
// to a cold run (bundled model), and every block file it keeps verifies.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kvtier/thread_pool.h"
#include "engine/prefill.h"
#include "gtest/gtest.h"
#include "kvtier/env.h"
#include "engine/engine_test_util.h"
#include "kvtier/ssd_tier.h"

namespace kvtier::engine {
namespace {

constexpr uint32_t kGenerate = 8;

using testing::BundledModel;

Result<BundledModel> LoadBundled() { return testing::LoadBundledModel(); }

std::vector<std::vector<int32_t>> Prompts(const Tokenizer& tok) {
  const char* texts[] = {
      "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who, for his own "
      "amusement, never took up any book but the Baronetage; there he found occupation.",
      "It is a truth universally acknowledged, that a single man in possession of a good "
      "fortune, must be in want of a wife, however little known the feelings may be.",
      "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy "
      "disposition, seemed to unite some of the best blessings of existence.",
      "The family of Dashwood had long been settled in Sussex. Their estate was large, and "
      "their residence was at Norland Park, in the centre of their property.",
  };
  std::vector<std::vector<int32_t>> out;
  for (const char* t : texts) out.push_back(tok.Encode(t, false, false));
  return out;
}

std::shared_ptr<BlockPool> Pool(const Model& m) {
  BlockPoolOptions o;
  o.shape = m.config().kv_shape();
  o.block_tokens = 16;
  o.capacity_bytes = 256ull << 20;
  return BlockPool::Create(o).value();
}

// The child: stores prompts (and variations, so new blocks keep coming) through a prefix
// cache whose RAM budget is a few blocks, so nearly every store spills. Reports each store
// on `fd` and never returns.
[[noreturn]] void SpillForever(const std::string& dir, int fd) {
  Result<BundledModel> l = LoadBundled();
  if (!l.ok()) _exit(3);
  SsdTierOptions so;
  so.dir = dir;
  so.queue_blocks = 4;
  so.writer_threads = 2;
  so.log = false;
  Result<std::shared_ptr<SsdTier>> tier = SsdTier::Open(so);
  if (!tier.ok()) _exit(4);
  auto pool = Pool(*l->model);
  PrefixCacheOptions po;
  po.memory_budget_bytes = 6 * pool->layout().block_stride;
  po.lower_tier = *tier;
  std::unique_ptr<PrefixCache> cache = PrefixCache::Create(po).value();
  const auto prompts = Prompts(*l->tokenizer);
  ThreadPool threads(1);
  for (uint32_t i = 0;; ++i) {
    std::vector<int32_t> p = prompts[i % prompts.size()];
    if (i >= prompts.size()) p.push_back(static_cast<int32_t>(100 + i));  // a new tail block
    Result<PrefillOutcome> out = Prefill(*l->model, cache.get(), pool, p, 512, &threads);
    if (!out.ok()) _exit(5);
    if (!cache->Store(l->model->fingerprint(), p, std::move(out->sequence)).ok()) _exit(6);
    if (write(fd, &i, sizeof i) != sizeof i) _exit(7);
  }
}

TEST(SsdRestart, SigkillDuringSpillingThenIdenticalGreedyOutput) {
  char tmpl[] = "/tmp/kvtier_sigkill_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    SpillForever(dir, fds[1]);
  }
  close(fds[1]);
  // Let it store every prompt at least twice (spilling all along), then kill it mid-flight.
  uint32_t stores = 0, i = 0;
  while (stores < 12 && read(fds[0], &i, sizeof i) == sizeof i) ++stores;
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  ASSERT_GE(stores, 12u) << "the child stopped early, status " << status;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // A new process: the tier's index from the files, a cold RAM cache above it.
  Result<BundledModel> l = LoadBundled();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto [tier, cache] = testing::OpenTieredCache(dir);
  EXPECT_GT(tier->Stats().found_blocks, 0u);
  auto pool = Pool(*l->model);
  ThreadPool threads(2);
  int served_from_ssd = 0;
  for (const std::vector<int32_t>& p : Prompts(*l->tokenizer)) {
    Result<PrefillOutcome> cold = Prefill(*l->model, nullptr, pool, p, 512, &threads);
    ASSERT_TRUE(cold.ok());
    auto cold_tokens = GreedyContinue(*l->model, cold->sequence, cold->logits, kGenerate, &threads);
    Result<PrefillOutcome> warm = Prefill(*l->model, cache.get(), pool, p, 512, &threads);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
    served_from_ssd += warm->reused_tokens > 0;
    auto warm_tokens = GreedyContinue(*l->model, warm->sequence, warm->logits, kGenerate, &threads);
    ASSERT_TRUE(cold_tokens.ok() && warm_tokens.ok());
    EXPECT_EQ(*warm_tokens, *cold_tokens) << "reused " << warm->reused_tokens;
  }
  const SsdTierStats ts = tier->Stats();
  std::printf("after SIGKILL at store %u: %llu block files found, %llu .tmp removed, %d of 4 "
              "prompts served from the SSD tier\n",
              stores, static_cast<unsigned long long>(ts.found_blocks),
              static_cast<unsigned long long>(ts.removed_tmp_files), served_from_ssd);
  EXPECT_GE(served_from_ssd, 2) << "too few prompts came back from the SSD tier";
  EXPECT_GT(cache->Stats().promoted_blocks, 0u);
  uint64_t good = 0, bad = 0;
  ASSERT_TRUE(tier->Verify(&good, &bad).ok());
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(good, 0u);
  tier.reset();
  cache.reset();
  (void)std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace kvtier::engine
