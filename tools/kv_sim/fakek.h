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
  } else if (m.rfind("alloc", 0) == 0 || m.rfind("ralloc", 0) == 0) {
    // Per channel across G tokens (f16 min + scale) with the code bits per channel chosen per
    // head and group: a greedy allocation of round(avg * head_dim) bits (KVTIER_FAKEK_AVG)
    // over the channels by the measured squared error (weighted by range^(2 * ALPHA)), 0..8
    // bits each. ralloc: the rows rotated first (rot seed 0), unrotated after.
    const bool rot = m[0] == 'r';
    const size_t G = std::atoi(m.c_str() + (rot ? 6 : 5));
    const char* av = std::getenv("KVTIER_FAKEK_AVG");
    double avg = av ? std::atof(av) : bits;
    if (const char* la = std::getenv("KVTIER_FAKEK_LAVG")) {  // per-layer averages; < 0: exact
      std::string l = la; size_t at = 0;
      for (uint32_t i = 0; i < layer && at != std::string::npos; ++i) { at = l.find(',', at); if (at != std::string::npos) ++at; }
      if (at != std::string::npos && at < l.size()) avg = std::atof(l.c_str() + at);
      if (avg < 0) return;
    }
    const char* al = std::getenv("KVTIER_FAKEK_ALPHA");
    const double alpha = al ? std::atof(al) : 0.0;
    const char* sk = std::getenv("KVTIER_FAKEK_SINK");
    const size_t sink = (sk && pos == 0) ? std::atoi(sk) : 0;  // first tokens kept exact
    if (rot) for (size_t r = 0; r < n * heads; ++r) RotateRef(k + r * d, d, 0, false);
    const bool meta8 = std::getenv("KVTIER_FAKEK_META8") != nullptr;
    const bool rank = std::getenv("KVTIER_FAKEK_RANK") != nullptr;  // top channels by range
    std::vector<float> lo(d), s1(d);
    // meta8: lo as int8 steps of A / 127 (rounded down), the step as A * 2^(-k/16), k 0..255
    // (rounded up), A = f16(max |lo|, |hi| of the head's channels in the group)
    const char* gm = std::getenv("KVTIER_FAKEK_GAMMA");
    const float gamma = gm ? float(std::atof(gm)) : 1.0f;
    // code q of nl + 1 levels over [lo, lo + nl * s]: uniform (gamma 1), or denser in the
    // middle: u(q) = 0.5 + 0.5 sign(z) |z|^gamma, z = 2q / nl - 1
    auto warp = [&](float x, float l0, float s, float nl) {
      if (gamma == 1.0f) return l0 + std::clamp(std::rint((x - l0) / s), 0.0f, nl) * s;
      const float r = s * nl;
      const float z = std::clamp(2.0f * (x - l0) / r - 1.0f, -1.0f, 1.0f);
      const float w = std::copysign(std::pow(std::fabs(z), 1.0f / gamma), z);
      const float q0 = std::floor((w + 1.0f) * 0.5f * nl);
      float best = 0, be = 1e30f;
      for (float q = std::max(0.0f, q0 - 1); q <= std::min(nl, q0 + 2); q += 1) {
        const float zz = 2.0f * q / nl - 1.0f;
        const float y = l0 + r * (0.5f + 0.5f * std::copysign(std::pow(std::fabs(zz), gamma), zz));
        if (std::fabs(y - x) < be) { be = std::fabs(y - x); best = y; }
      }
      return best;
    };
    float A = 0;
    auto step_of = [&](float r, int bb) {
      const float nl = float((1 << bb) - 1);
      if (!meta8) return H(r / nl);
      const float s = r / nl;
      if (s <= 0 || A <= 0) return 0.0f;
      int kk = int(std::floor(-16.0 * std::log2(double(s) / A)));
      kk = std::clamp(kk, 0, 255);
      float q = A * float(std::exp2(-kk / 16.0));
      while (q < s && kk > 0) { --kk; q = A * float(std::exp2(-kk / 16.0)); }
      return q;
    };
    std::vector<double> err(d * 9);
    std::vector<int> b(d);
    for (size_t t0 = sink; t0 < n; t0 += G) {
      const size_t t1 = std::min(n, t0 + G);
      for (size_t h = 0; h < heads; ++h) {
        for (size_t c = 0; c < d; ++c) {
          float l = 1e30f, hi = -1e30f;
          for (size_t t = t0; t < t1; ++t) { const float x = k[(t * heads + h) * d + c]; l = std::min(l, x); hi = std::max(hi, x); }
          if (meta8) {
            if (c == 0) {
              A = 0;
              for (size_t c2 = 0; c2 < d; ++c2) for (size_t t = t0; t < t1; ++t) A = std::max(A, std::fabs(k[(t * heads + h) * d + c2]));
              A = H(A * 1.001f);
            }
            lo[c] = A > 0 ? std::floor(l / A * 127.0f) * A / 127.0f : 0.0f;
          } else {
            lo[c] = H(l);
          }
          s1[c] = hi - lo[c];
          for (int bb = 0; bb <= 8; ++bb) {
            double e = 0;
            const float nl = float((1 << bb) - 1);
            const float s = bb ? step_of(s1[c], bb) : 0.0f;
            const float mid = H(lo[c] + 0.5f * s1[c]);
            for (size_t t = t0; t < t1; ++t) {
              const float x = k[(t * heads + h) * d + c];
              float y = mid;
              if (bb && s > 0) y = warp(x, lo[c], s, nl);
              e += double(x - y) * (x - y);
            }
            err[c * 9 + bb] = e * std::pow(double(s1[c]) + 1e-12, 2 * alpha);
          }
          b[c] = 0;
        }
        long budget = std::lround(avg * double(d));
        if (rank) {  // floor(avg) bits everywhere, one more for the channels of largest range
          std::vector<size_t> o(d); for (size_t c = 0; c < d; ++c) o[c] = c;
          std::stable_sort(o.begin(), o.end(), [&](size_t x, size_t y) { return s1[x] > s1[y]; });
          const int base = int(std::floor(avg));
          const long extra = budget - long(base) * long(d);
          for (size_t i = 0; i < d; ++i) b[o[i]] = base + (long(i) < extra ? 1 : 0);
          budget = 0;
        }
        while (budget > 0) {
          // the best gain per bit of any step up (the error is not convex in the bits: 1 bit
          // of min / max is worse than the midpoint)
          size_t best = d; int step = 0; double gain = -1e300;
          for (size_t c = 0; c < d; ++c) for (int j = b[c] + 1; j <= 8 && j - b[c] <= budget; ++j) {
            const double g = (err[c * 9 + b[c]] - err[c * 9 + j]) / (j - b[c]);
            if (g > gain) { gain = g; best = c; step = j - b[c]; }
          }
          if (best == d) break;
          b[best] += step; budget -= step;
        }
        for (size_t c = 0; c < d; ++c) {
          const float nl = float((1 << b[c]) - 1);
          const float s = b[c] ? step_of(s1[c], b[c]) : 0.0f;
          const float mid = H(lo[c] + 0.5f * s1[c]);
          for (size_t t = t0; t < t1; ++t) {
            float& x = k[(t * heads + h) * d + c];
            if (!b[c] || s == 0) { x = b[c] ? lo[c] : mid; continue; }
            x = warp(x, lo[c], s, nl);
          }
        }
      }
    }
    if (rot) for (size_t r = 0; r < n * heads; ++r) RotateRef(k + r * d, d, 0, true);
  } else if (m == "stats") {
    // print per layer: ||mean||^2 / mean ||k||^2 over the call
    std::vector<double> u(heads * d, 0.0); double e = 0;
    for (size_t t = 0; t < n; ++t) for (size_t i = 0; i < heads * d; ++i) { u[i] += k[t * heads * d + i]; e += double(k[t*heads*d+i]) * k[t*heads*d+i]; }
    double mm = 0; for (auto& x : u) { x /= n; mm += x * x; }
    if (n > 100) fprintf(stderr, "layer %u n %zu mean^2/E|k|^2 = %.3f\n", layer, n, mm * n / e);
  }
}
// V schemes (KVTIER_FAKEV=MODE, KVTIER_FAKEV_BITS=b, with --kv-type K/f32): v [n][heads][d]
// in place. vlm<B>: rows rotated (seed 0), blocks of B values, Gaussian Lloyd-Max levels of b
// bits times an f16 scale per block (rms start, then least squares, codes again): b + 16 / B
// bits per value.
inline std::string ModeV() { const char* m = std::getenv("KVTIER_FAKEV"); return m ? m : ""; }
inline void ApplyV(float* v, size_t n, size_t heads, size_t d) {
  static const float l2[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};
  static const float l3[8] = {-2.1520f, -1.3440f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3440f, 2.1520f};
  static const float l4[16] = {-2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
                               0.1284f, 0.3881f, 0.6568f, 0.9424f, 1.2562f, 1.6181f, 2.0690f, 2.7326f};
  const std::string m = ModeV();
  const char* bs = std::getenv("KVTIER_FAKEV_BITS");
  const int bits = bs ? std::atoi(bs) : 3;
  const float* L = bits == 2 ? l2 : bits == 3 ? l3 : l4;
  const int nl = 1 << bits;
  if (m.rfind("vrot", 0) == 0) {  // rot<b>'s codebook, its fit, over blocks of B values
    const size_t B = std::atoi(m.c_str() + 4);
    const float* RL = RotLevelsOf(bits);
    for (size_t r = 0; r < n * heads; ++r) {
      float* x = v + r * d;
      RotateRef(x, d, 0, false);
      for (size_t o = 0; o < d; o += B) {
        float d0 = 0; for (size_t i = o; i < o + B; ++i) if (std::fabs(x[i]) > std::fabs(d0)) d0 = x[i];
        if (d0 == 0) continue;
        std::vector<int> q(B);
        float sc = d0;
        for (int it = 0; it < 3; ++it) {
          double num = 0, den = 0;
          for (size_t i = o; i < o + B; ++i) {
            int bi = 0; float be = 1e30f;
            for (int j = 0; j < nl; ++j) { const float e = std::fabs(x[i] / sc - RL[j]); if (e < be) { be = e; bi = j; } }
            q[i - o] = bi; num += double(x[i]) * RL[bi]; den += double(RL[bi]) * RL[bi];
          }
          if (it < 2 && den > 0) sc = H(float(num / den));
        }
        for (size_t i = o; i < o + B; ++i) x[i] = RL[q[i - o]] * sc;
      }
      RotateRef(x, d, 0, true);
    }
    return;
  }
  if (m.rfind("vlm", 0) != 0) return;
  const size_t B = std::atoi(m.c_str() + 3);
  for (size_t r = 0; r < n * heads; ++r) {
    float* x = v + r * d;
    RotateRef(x, d, 0, false);
    for (size_t o = 0; o < d; o += B) {
      double ss = 0; for (size_t i = o; i < o + B; ++i) ss += double(x[i]) * x[i];
      float sc = float(std::sqrt(ss / B));
      if (sc == 0) continue;
      std::vector<int> q(B);
      for (int it = 0; it < 3; ++it) {
        double num = 0, den = 0;
        for (size_t i = o; i < o + B; ++i) {
          int bi = 0; float be = 1e30f;
          for (int j = 0; j < nl; ++j) { const float e = std::fabs(x[i] / sc - L[j]); if (e < be) { be = e; bi = j; } }
          q[i - o] = bi; num += double(x[i]) * L[bi]; den += double(L[bi]) * L[bi];
        }
        if (it < 2 && den > 0) sc = float(num / den);
        sc = H(sc);
      }
      for (size_t i = o; i < o + B; ++i) x[i] = L[q[i - o]] * sc;
    }
    RotateRef(x, d, 0, true);
  }
}
}  // namespace kvtier::fakek
