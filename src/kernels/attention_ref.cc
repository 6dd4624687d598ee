// Float64 reference attention (see attention_ref.h). Stateless; thread-safe.
#include "kernels/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_check.h"
#include "kvtier/quant.h"
#include "quant/chan_simd.h"

namespace kvtier::ref {

Status Attention(const PagedKvView& kv, const float* q, std::span<const uint32_t> q_lens,
                 const AttentionParams& params, std::vector<double>* out) {
  KVTIER_RETURN_IF_ERROR(CheckAttentionArgs(kv, q, q_lens, params, out));
  const size_t d = kv.head_dim;
  const uint32_t group = params.n_heads / kv.n_kv_heads;
  const double scale = params.scale > 0 ? params.scale : 1.0 / std::sqrt(static_cast<double>(d));
  size_t total_q = 0;
  for (uint32_t n : q_lens) total_q += n;
  out->assign(total_q * params.n_heads * d, 0.0);
  std::vector<float> krow(d), vrow(d);
  std::vector<double> s;
  const int64_t window = params.window > 0 ? params.window : kv.window;  // the layer's
  size_t q0 = 0;
  for (uint32_t r = 0; r < kv.n_rows; ++r) {
    const uint32_t len = kv.rows[r].length;
    for (uint32_t i = 0; i < q_lens[r]; ++i) {
      const int64_t pos = static_cast<int64_t>(len) - q_lens[r] + i;
      const int64_t first =
          window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (uint32_t h = 0; h < params.n_heads; ++h) {
        const uint32_t kvh = h / group;
        const float* qh = q + ((q0 + i) * params.n_heads + h) * d;
        s.assign(static_cast<size_t>(pos - first + 1), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t t = first; t <= pos; ++t) {
          const auto tt = static_cast<uint32_t>(t);
          if (kv.k_format.is_token_grouped()) {  // from its group's first row
            const uint32_t j = tt % kv.k_format.group;
            ref::DequantizeChanHead(kv.k_format, kv.k_row(r, tt - j, kvh), kv.k_token_stride, j, 1,
                                    d, DType::kF32, krow.data(), d);
          } else {
            Status st = DequantizeRowsRef(kv.k_format, kv.k_row(r, tt, kvh), 1, d, DType::kF32,
                                          krow.data());
            if (!st.ok()) return st;
          }
          double dot = 0;
          for (size_t j = 0; j < d; ++j) dot += static_cast<double>(qh[j]) * krow[j];
          double sc = dot * scale;
          if (params.softcap > 0) sc = params.softcap * std::tanh(sc / params.softcap);
          s[static_cast<size_t>(t - first)] = sc;
          m = std::max(m, sc);
        }
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - m));
        double* o = out->data() + ((q0 + i) * params.n_heads + h) * d;
        for (int64_t t = first; t <= pos; ++t) {
          Status st = DequantizeRowsRef(kv.v_format, kv.v_row(r, static_cast<uint32_t>(t), kvh),
                                        1, d, DType::kF32, vrow.data());
          if (!st.ok()) return st;
          const double p = s[static_cast<size_t>(t - first)] / l;
          for (size_t j = 0; j < d; ++j) o[j] += p * vrow[j];
        }
      }
    }
    q0 += q_lens[r];
  }
  return Status::OK();
}

}  // namespace kvtier::ref
