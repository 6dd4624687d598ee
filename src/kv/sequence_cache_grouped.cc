// SequenceCache: appends of token-grouped K (Format::is_token_grouped, e.g. chan4g64), with
// the exact keys of each layer's partial group kept as the tail (see sequence_cache.h).
// Thread-compatible, as SequenceCache.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kvtier/quant.h"
#include "kvtier/quant_chan.h"
#include "kvtier/sequence_cache.h"

namespace kvtier {

Status SequenceCache::AppendGroupedK(uint32_t layer, uint32_t pos, DType src_dtype,
                                     const void* k, uint32_t n) {
  const KvBlockLayout& l = pool_->layout();
  const Format& f = l.k_format;
  const size_t heads = l.shape.n_kv_heads, d = l.shape.head_dim, hd = heads * d;
  const uint32_t G = f.group, bt = l.block_tokens;
  const uint32_t g0 = pos / G * G, end = pos + n;
  auto rows_at = [&](uint32_t t) {  // K row of token t, head 0 (blocks are reserved)
    return pool_->block_data(block_ids()[t / bt]) + l.k_offset(layer) + (t % bt) * l.k_token_stride;
  };
  // f32 keys of tokens [g0, end): the partial group's from the tail (or decoded when it came
  // without one), then the new ones.
  std::vector<float> x(static_cast<size_t>(end - g0) * hd);  // [end - g0][heads][head_dim]
  KTail& tail = k_tail_[layer];
  if (pos > g0) {
    if (tail.values && tail.first == g0 && tail.count == pos - g0) {
      std::memcpy(x.data(), tail.values->data(), static_cast<size_t>(pos - g0) * hd * sizeof(float));
    } else {
      KVTIER_RETURN_IF_ERROR(
          DequantizeChanRows(f, rows_at(g0), 0, pos - g0, heads, d, DType::kF32, x.data()));
    }
  }
  KVTIER_RETURN_IF_ERROR(DequantizeRows(Format::Plain(src_dtype), k, size_t{n} * heads, d,
                                        DType::kF32, x.data() + static_cast<size_t>(pos - g0) * hd));
  // Whole groups never cross a block (block_tokens is a multiple of G): one block at a time.
  for (uint32_t t = g0; t < end;) {
    const uint32_t piece = std::min(end - t, (t / bt + 1) * bt - t);
    KVTIER_RETURN_IF_ERROR(QuantizeChanGroups(f, DType::kF32, x.data() + static_cast<size_t>(t - g0) * hd,
                                              piece, heads, d, rows_at(t)));
    t += piece;
  }
  const uint32_t last = end / G * G;
  if (end > last) {
    auto v = std::make_shared<std::vector<float>>(x.begin() + static_cast<std::ptrdiff_t>((last - g0) * hd),
                                                  x.end());
    tail = {last, end - last, std::move(v)};
  } else {
    tail = {};
  }
  return Status::OK();
}

}  // namespace kvtier
