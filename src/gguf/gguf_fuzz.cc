// libFuzzer target for the GGUF reader: any byte string must parse to a GgufFile or an error,
// never crash, hang or read outside the input. On success every accessor is exercised and every
// tensor byte read, so ASan sees an escape. Built as `kvtier_gguf_fuzz` with clang and
// -DKVTIER_BUILD_FUZZ=ON; compiled into kvtier_gguf_test everywhere (corpus replay).
//   build/fuzz/kvtier_gguf_fuzz -max_len=4096 CORPUS_DIR
// Thread safety: stateless.
#include <cstddef>
#include <cstdint>

#include "kvtier/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = kvtier::GgufFile::FromMemory(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!f.ok()) return 0;
  const kvtier::GgufFile& g = **f;
  size_t sink = 0;
  for (const auto& [key, value] : g.metadata()) {
    sink += g.GetString(key).ok() + g.GetUint(key).ok() + g.GetInt(key).ok() +
            g.GetFloat(key).ok() + g.GetBool(key).ok();
    auto s = g.GetStringArray(key);
    if (s.ok()) sink += s->size();
    auto fl = g.GetFloatArray(key);
    if (fl.ok()) sink += fl->size();
    auto in = g.GetIntArray(key);
    if (in.ok()) sink += in->size();
  }
  for (const kvtier::GgufTensor& t : g.tensors()) {
    if (g.FindTensor(t.name) != &t) __builtin_trap();
    for (uint64_t i = 0; i < t.n_bytes; ++i) sink += t.data[i];
  }
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
