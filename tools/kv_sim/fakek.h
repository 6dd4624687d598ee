// K fake-quantization schemes for tools/kv_sim (included only by the build.sh hook, never by
// src/): KVTIER_FAKEK=MODE, KVTIER_FAKEK_BITS=b. k: [n tokens][heads][d] f32, modified in
// place as the scheme would store and decode it. Modes: none; rot (rot<b> round trip);
// mean_first / mean_all (a per-head mean of the first 32 / all tokens of the first call,
// f16, subtracted before rot<b>: softmax-invariant); kivi<G> (per channel across G tokens,
// f16 min + scale, b-bit uniform: KIVI); cmean<G> (per-channel f16 mean over G tokens, then
// rot<b> rows); stats (prints the share of the mean in E|k|^2 per layer). Not thread-safe.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <cmath>
#include <algorithm>
#include "quant/rot.h"
namespace kvtier::fakek {
inline std::string Mode() { const char* m = std::getenv("KVTIER_FAKEK"); return m ? m : ""; }
inline int Bits() { const char* m = std::getenv("KVTIER_FAKEK_BITS"); return m ? std::atoi(m) : 4; }
inline void RotQ(float* x, size_t d, int bits) {
  RotateRef(x, d, 0, false);
  uint8_t blk[64];
  for (size_t o = 0; o < d; o += 32) {
    if (bits == 4) { QuantizeRotBlock<4>(x + o, blk); DequantizeRotBlock<4>(blk, x + o); }
    else if (bits == 3) { QuantizeRotBlock<3>(x + o, blk); DequantizeRotBlock<3>(blk, x + o); }
    else { QuantizeRotBlock<2>(x + o, blk); DequantizeRotBlock<2>(blk, x + o); }
  }
  RotateRef(x, d, 0, true);
}
inline float H(float v) { return F16ToF32(F32ToF16(v)); }
// k: [n tokens][heads][d] f32 in place; pos: first token position; layer.
inline void Apply(float* k, size_t n, size_t heads, size_t d, uint32_t pos, uint32_t layer) {
  static std::map<uint32_t, std::vector<float>> mu;  // layer -> [heads][d]
  const std::string m = Mode();
  const int bits = Bits();
  if (m == "rot") {
    for (size_t r = 0; r < n * heads; ++r) RotQ(k + r * d, d, bits);
  } else if (m == "mean_first" || m == "mean_all") {
    if (pos == 0) {
      const size_t nt = m == "mean_all" ? n : std::min<size_t>(n, 32);
      std::vector<float> u(heads * d, 0.0f);
      for (size_t t = 0; t < nt; ++t) for (size_t i = 0; i < heads * d; ++i) u[i] += k[t * heads * d + i];
      for (auto& x : u) x = H(x / nt);
      mu[layer] = u;
    }
    const std::vector<float>& u = mu[layer];
    for (size_t t = 0; t < n; ++t) for (size_t h = 0; h < heads; ++h) {
      float* x = k + (t * heads + h) * d;
      for (size_t i = 0; i < d; ++i) x[i] -= u[h * d + i];
      RotQ(x, d, bits);
      for (size_t i = 0; i < d; ++i) x[i] += u[h * d + i];
    }
  } else if (m.rfind("kivi", 0) == 0) {  // per channel across G tokens (aligned to pos), asym
    const size_t G = std::atoi(m.c_str() + 4);
    const float nl = float((1 << bits) - 1);
    for (size_t t0 = 0; t0 < n; t0 += G) {
      const size_t t1 = std::min(n, t0 + G);
      for (size_t c = 0; c < heads * d; ++c) {
        float lo = 1e30f, hi = -1e30f;
        for (size_t t = t0; t < t1; ++t) { lo = std::min(lo, k[t * heads * d + c]); hi = std::max(hi, k[t * heads * d + c]); }
        lo = H(lo); float s = H((hi - lo) / nl); if (s == 0) continue;
        for (size_t t = t0; t < t1; ++t) { float& x = k[t * heads * d + c]; float q = std::clamp(std::rint((x - lo) / s), 0.0f, nl); x = lo + q * s; }
      }
    }
  } else if (m.rfind("cmean", 0) == 0) {  // per-channel f16 mean over G tokens, then rot rows
    const size_t G = std::atoi(m.c_str() + 5);
    std::vector<float> uh(heads * d);
    for (size_t t0 = 0; t0 < n; t0 += G) {
      const size_t t1 = std::min(n, t0 + G);
      for (size_t c = 0; c < heads * d; ++c) {
        double u = 0; for (size_t t = t0; t < t1; ++t) u += k[t * heads * d + c];
        uh[c] = H(float(u / double(t1 - t0)));
        for (size_t t = t0; t < t1; ++t) k[t * heads * d + c] -= uh[c];
      }
      for (size_t r = t0 * heads; r < t1 * heads; ++r) RotQ(k + r * d, d, bits);
      for (size_t t = t0; t < t1; ++t) for (size_t c = 0; c < heads * d; ++c) k[t * heads * d + c] += uh[c];
    }
  } else if (m == "stats") {
    // print per layer: ||mean||^2 / mean ||k||^2 over the call
    std::vector<double> u(heads * d, 0.0); double e = 0;
    for (size_t t = 0; t < n; ++t) for (size_t i = 0; i < heads * d; ++i) { u[i] += k[t * heads * d + i]; e += double(k[t*heads*d+i]) * k[t*heads*d+i]; }
    double mm = 0; for (auto& x : u) { x /= n; mm += x * x; }
    if (n > 100) fprintf(stderr, "layer %u n %zu mean^2/E|k|^2 = %.3f\n", layer, n, mm * n / e);
  }
}
}  // namespace kvtier::fakek
