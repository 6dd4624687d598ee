// kvtier's own quantizers of the weights-module block types (see quantize.h), written from
// the format definitions of weights/blocks.h (not a port of ggml's search):
//   1. every scale group is fitted alone: codes for a grid of candidate scales, then the
//      least-squares scale (and offset) for those codes; the lowest squared error wins;
//   2. K-quant / iq4_xs super-blocks quantize the groups' scales (and mins) against one
//      fp16 super-scale, then try each quantized scale and its neighbours with re-chosen
//      codes and keep the best;
//   3. codes are always re-chosen for the scales as stored (fp16 rounding included).
// The error is plain squared error; quantize_test measures it against ggml's quantizer on the
// golden inputs. Stateless; thread-safe.
#include "weights/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "weights/blocks.h"

namespace kvtier::weights {
namespace {

constexpr int kSteps = 12;          // candidate scales either side of the first guess
constexpr float kStepFrac = 0.08f;  // spacing of the candidates, in code units

// Round to nearest (ties to even) for |v| < 2^22: adding 1.5 * 2^23 leaves the integer in
// the low mantissa bits. Callers clamp v to their code range first (NaN-free inputs).
inline int Nint(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}
inline int Clamp(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }
// Nearest integer code in [lo, hi] of v (v clamped in float first, so huge v cannot overflow).
inline int Code(float v, int lo, int hi) {
  return Nint(std::min(static_cast<float>(hi), std::max(static_cast<float>(lo), v)));
}

// ---------------------------------------------------------------- affine groups

// Codes L in [0, nmax] for x ~ a * L + b (a > 0); returns the squared error.
double AffineCodes(const float* x, int n, int nmax, float a, float b, uint8_t* L) {
  double err = 0.0;
  const float ia = a > 0.0f ? 1.0f / a : 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = a > 0.0f ? Code((x[i] - b) * ia, 0, nmax) : 0;
    L[i] = static_cast<uint8_t>(l);
    const double e = double(a) * l + b - x[i];
    err += e * e;
  }
  return err;
}

// Fits x ~ a * L + b with L in [0, nmax], a >= 0. nonpos_b: b <= 0 (the K-quants store
// -b as an unsigned min). Returns the squared error; L holds the best codes.
double FitAffine(const float* x, int n, int nmax, bool nonpos_b, float* a_out, float* b_out,
                 uint8_t* L) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (nonpos_b) lo = std::min(lo, 0.0f);
  if (!(hi > lo)) {  // constant group
    *a_out = 0.0f;
    *b_out = lo;
    return AffineCodes(x, n, nmax, 0.0f, lo, L);
  }
  double best = AffineCodes(x, n, nmax, (hi - lo) / nmax, lo, L);  // plain min/max
  *a_out = (hi - lo) / nmax;
  *b_out = lo;
  double sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    sx += x[i];
    sxx += double(x[i]) * x[i];
  }
  double best_fit = std::numeric_limits<double>::infinity();
  float best_a = 0, best_b = 0;
  for (int k = -kSteps; k <= kSteps; ++k) {
    const float iscale = (nmax + kStepFrac * k) / (hi - lo);
    if (iscale <= 0.0f) continue;
    double sl = 0, sll = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Code((x[i] - lo) * iscale, 0, nmax);
      sl += l;
      sll += double(l) * l;
      sxl += double(x[i]) * l;
    }
    const double det = n * sll - sl * sl;
    if (det <= 0) continue;
    double a = (n * sxl - sl * sx) / det;
    double b = (sll * sx - sl * sxl) / det;
    if (nonpos_b && b > 0) {
      b = 0;
      a = sxl / sll;
    }
    if (a <= 0) continue;
    // Squared error of these codes on the fitted line, from the sums.
    const double err = a * a * sll + 2 * a * b * sl + n * b * b - 2 * a * sxl - 2 * b * sx + sxx;
    if (err < best_fit) {
      best_fit = err;
      best_a = float(a);
      best_b = float(b);
    }
  }
  if (best_fit < std::numeric_limits<double>::infinity()) {
    // Re-choose the codes for the best line; keep it if it beats plain min/max.
    uint8_t trial[kQK];
    const double err = AffineCodes(x, n, nmax, best_a, best_b, trial);
    if (err < best) {
      best = err;
      *a_out = best_a;
      *b_out = best_b;
      std::memcpy(L, trial, n);
    }
  }
  return best;
}

// ---------------------------------------------------------------- symmetric groups

// Codes L in [lo, hi] for x ~ a * L; returns the squared error.
double SymCodes(const float* x, int n, int lo, int hi, float a, int8_t* L) {
  double err = 0.0;
  const float ia = a != 0.0f ? 1.0f / a : 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = Code(x[i] * ia, lo, hi);
    L[i] = static_cast<int8_t>(l);
    const double e = double(a) * l - x[i];
    err += e * e;
  }
  return err;
}

// Fits x ~ a * L, L in [lo, hi] (lo < 0 < hi), a of either sign. Returns the squared error.
double FitSym(const float* x, int n, int lo, int hi, float* a_out, int8_t* L) {
  float mx = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(mx)) mx = x[i];
  }
  *a_out = 0.0f;
  double best = SymCodes(x, n, lo, hi, 0.0f, L);
  if (mx == 0.0f) return best;
  // The largest magnitude maps to the negative end (lo) or to the positive end (hi); the
  // error of a candidate's codes with their least-squares scale is sxx - sxl^2 / sll.
  double best_gain = 0;
  float best_a = 0;
  for (const int end : {lo, hi}) {
    for (int k = -kSteps; k <= kSteps; ++k) {
      const float target = static_cast<float>(end) + (end < 0 ? -1.0f : 1.0f) * kStepFrac * k;
      if (target * end <= 0.0f) continue;
      const float iscale = target / mx;
      double sll = 0, sxl = 0;
      for (int i = 0; i < n; ++i) {
        const int l = Code(x[i] * iscale, lo, hi);
        sll += double(l) * l;
        sxl += double(x[i]) * l;
      }
      if (sll <= 0) continue;
      const double gain = sxl * sxl / sll;
      if (gain > best_gain) {
        best_gain = gain;
        best_a = float(sxl / sll);
      }
    }
  }
  if (best_gain > 0) {
    int8_t trial[kQK];
    const double err = SymCodes(x, n, lo, hi, best_a, trial);
    if (err < best) {
      best = err;
      *a_out = best_a;
      std::memcpy(L, trial, n);
    }
  }
  return best;
}

// ---------------------------------------------------------------- iq4 codebook groups

// Midpoints between consecutive codebook values: value v's nearest index is the number of
// midpoints below it (ties to the lower value).
constexpr float kIq4Mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                               7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

inline int NearestIQ4(float v) {  // branch-free: the codes' order is data-dependent
  int i = 0;
  for (float m : kIq4Mid) i += v > m ? 1 : 0;
  return i;
}

double IQ4Codes(const float* x, int n, float a, uint8_t* L) {
  double err = 0.0;
  const float ia = a != 0.0f ? 1.0f / a : 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = NearestIQ4(x[i] * ia);
    L[i] = static_cast<uint8_t>(l);
    const double e = double(a) * kIq4NlValues[l] - x[i];
    err += e * e;
  }
  return err;
}

// Fits x ~ a * kIq4NlValues[L]. Returns the squared error.
double FitIQ4(const float* x, int n, float* a_out, uint8_t* L) {
  float mx = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(mx)) mx = x[i];
  }
  *a_out = 0.0f;
  double best = IQ4Codes(x, n, 0.0f, L);
  if (mx == 0.0f) return best;
  double best_gain = 0;
  float best_a = 0;
  for (const float end : {-127.0f, 113.0f}) {
    for (int k = -kSteps / 2; k <= kSteps / 2; ++k) {
      const float target = end + (end < 0 ? -1.0f : 1.0f) * 1.5f * k;
      const float ia = target / mx;
      double svv = 0, sxv = 0;
      for (int i = 0; i < n; ++i) {
        const double v = kIq4NlValues[NearestIQ4(x[i] * ia)];
        svv += v * v;
        sxv += x[i] * v;
      }
      if (svv <= 0) continue;
      const double gain = sxv * sxv / svv;  // error = sxx - gain at the best scale
      if (gain > best_gain) {
        best_gain = gain;
        best_a = float(sxv / svv);
      }
    }
  }
  if (best_gain > 0) {
    uint8_t trial[kQK];
    const double err = IQ4Codes(x, n, best_a, trial);
    if (err < best) {
      best = err;
      *a_out = best_a;
      std::memcpy(L, trial, n);
    }
  }
  return best;
}

// ---------------------------------------------------------------- legacy blocks

void QuantQ4_1orQ5_1(const float* x, int nmax, uint16_t* d, uint16_t* m, uint8_t* L) {
  float a = 0, b = 0;
  FitAffine(x, kQK, nmax, false, &a, &b, L);
  *d = F32ToF16(a);
  *m = F32ToF16(b);
  AffineCodes(x, kQK, nmax, F16ToF32(*d), F16ToF32(*m), L);
}

void PackNibbles(const uint8_t* L, uint8_t* qs) {  // value j low, j + 16 high
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((L[j] & 15) | (L[j + 16] & 15) << 4);
}
void PackHighBits(const uint8_t* L, uint8_t* qh) {  // bit 4 of value i at bit i
  uint32_t h = 0;
  for (int i = 0; i < 32; ++i) h |= static_cast<uint32_t>((L[i] >> 4) & 1) << i;
  std::memcpy(qh, &h, 4);
}

void QuantQ4_1(const float* x, size_t nb, BlockQ4_1* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK) {
    uint8_t L[kQK];
    QuantQ4_1orQ5_1(x, 15, &y[i].d, &y[i].m, L);
    PackNibbles(L, y[i].qs);
  }
}

void QuantQ5_1(const float* x, size_t nb, BlockQ5_1* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK) {
    uint8_t L[kQK];
    QuantQ4_1orQ5_1(x, 31, &y[i].d, &y[i].m, L);
    PackNibbles(L, y[i].qs);
    PackHighBits(L, y[i].qh);
  }
}

void QuantQ5_0(const float* x, size_t nb, BlockQ5_0* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK) {
    float a = 0;
    int8_t S[kQK];
    FitSym(x, kQK, -16, 15, &a, S);
    y[i].d = F32ToF16(a);
    SymCodes(x, kQK, -16, 15, F16ToF32(y[i].d), S);
    uint8_t L[kQK];
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(S[j] + 16);
    PackNibbles(L, y[i].qs);
    PackHighBits(L, y[i].qh);
  }
}

void QuantIQ4_NL(const float* x, size_t nb, BlockIQ4_NL* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK) {
    float a = 0;
    uint8_t L[kQK];
    FitIQ4(x, kQK, &a, L);
    y[i].d = F32ToF16(a);
    IQ4Codes(x, kQK, F16ToF32(y[i].d), L);
    PackNibbles(L, y[i].qs);
  }
}

// ---------------------------------------------------------------- K-quants with mins

// Super-block of n_sub affine groups of `sub` values: scales and mins quantized to
// [0, smax] against fp16 d / dmin; writes the codes (L [n_sub * sub]) and quantized scales.
void AffineSuperBlock(const float* x, int n_sub, int sub, int nmax, int smax, uint16_t* d16,
                      uint16_t* dmin16, uint8_t* sc, uint8_t* mn, uint8_t* L) {
  float a[16], m[16];
  float max_a = 0, max_m = 0;
  for (int j = 0; j < n_sub; ++j) {
    float b = 0;
    FitAffine(x + j * sub, sub, nmax, true, &a[j], &b, L + j * sub);
    m[j] = -b;
    max_a = std::max(max_a, a[j]);
    max_m = std::max(max_m, m[j]);
  }
  *d16 = F32ToF16(max_a / smax);
  *dmin16 = F32ToF16(max_m / smax);
  const float d = F16ToF32(*d16), dmin = F16ToF32(*dmin16);
  uint8_t trial[kQK];
  for (int j = 0; j < n_sub; ++j) {
    const float* xj = x + j * sub;
    const int s0 = d > 0 ? Clamp(Nint(a[j] / d), 0, smax) : 0;
    const int m0 = dmin > 0 ? Clamp(Nint(m[j] / dmin), 0, smax) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int s = std::max(0, s0 - 1); s <= std::min(smax, s0 + 1); ++s) {
      for (int mm = std::max(0, m0 - 1); mm <= std::min(smax, m0 + 1); ++mm) {
        // x = (d * s) * L - (dmin * mm), in the decoder's float arithmetic.
        const float ea = d * static_cast<float>(s), eb = -(dmin * static_cast<float>(mm));
        const double err = AffineCodes(xj, sub, nmax, ea, eb, trial);
        if (err < best) {
          best = err;
          sc[j] = static_cast<uint8_t>(s);
          mn[j] = static_cast<uint8_t>(mm);
          std::memcpy(L + j * sub, trial, sub);
        }
      }
    }
  }
}

void QuantQ2_K(const float* x, size_t nb, BlockQ2_K* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    uint8_t L[kQK_K], sc[16], mn[16];
    AffineSuperBlock(x, 16, 16, 3, 15, &y[i].d, &y[i].dmin, sc, mn, L);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(sc[j] | mn[j] << 4);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    // value 128 h + 32 s + l: 2-bit field s of qs[32 h + l]
    for (int v = 0; v < 256; ++v) {
      const int h = v / 128, s = (v % 128) / 32, l = v % 32;
      y[i].qs[32 * h + l] = static_cast<uint8_t>(y[i].qs[32 * h + l] | L[v] << (2 * s));
    }
  }
}

void QuantQ4_K(const float* x, size_t nb, BlockQ4_K* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    uint8_t L[kQK_K], sc[8], mn[8];
    AffineSuperBlock(x, 8, 32, 15, 63, &y[i].d, &y[i].dmin, sc, mn, L);
    PackScaleMinK4(sc, mn, y[i].scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | L[64 * c + 32 + l] << 4);
      }
    }
  }
}

void QuantQ5_K(const float* x, size_t nb, BlockQ5_K* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    uint8_t L[kQK_K], sc[8], mn[8];
    AffineSuperBlock(x, 8, 32, 31, 63, &y[i].d, &y[i].dmin, sc, mn, L);
    PackScaleMinK4(sc, mn, y[i].scales);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
        y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | ((lo >> 4) & 1) << (2 * c) |
                                          ((hi >> 4) & 1) << (2 * c + 1));
      }
    }
  }
}

// ---------------------------------------------------------------- symmetric K-quants

// Super-block of n_sub symmetric groups: group scales quantized to [slo, shi] against one fp16
// d (the largest-magnitude scale maps to slo); codes in [lo, hi]. Writes S and the scales.
void SymSuperBlock(const float* x, int n_sub, int sub, int lo, int hi, int slo, int shi,
                   uint16_t* d16, int* qs_out, int8_t* S) {
  float a[16];
  float amax = 0;
  for (int j = 0; j < n_sub; ++j) {
    FitSym(x + j * sub, sub, lo, hi, &a[j], S + j * sub);
    if (std::fabs(a[j]) > std::fabs(amax)) amax = a[j];
  }
  *d16 = F32ToF16(amax / slo);
  const float d = F16ToF32(*d16);
  int8_t trial[kQK];
  for (int j = 0; j < n_sub; ++j) {
    const float* xj = x + j * sub;
    const int s0 = d != 0.0f ? Clamp(Nint(a[j] / d), slo, shi) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int s = std::max(slo, s0 - 1); s <= std::min(shi, s0 + 1); ++s) {
      const double err = SymCodes(xj, sub, lo, hi, d * static_cast<float>(s), trial);
      if (err < best) {
        best = err;
        qs_out[j] = s;
        std::memcpy(S + j * sub, trial, sub);
      }
    }
  }
}

void QuantQ3_K(const float* x, size_t nb, BlockQ3_K* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    int8_t S[kQK_K];
    int s[16];
    SymSuperBlock(x, 16, 16, -4, 3, -32, 31, &y[i].d, s, S);
    int8_t sc[16];
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(s[j]);
    PackQ3KScales(sc, y[i].scales);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    for (int v = 0; v < 256; ++v) {
      const int u = S[v] + 4;  // [0, 7]: low 2 bits in qs, bit 2 in hmask (set: no -4)
      const int h = v / 128, sh = (v % 128) / 32, l = v % 32;
      y[i].qs[32 * h + l] = static_cast<uint8_t>(y[i].qs[32 * h + l] | (u & 3) << (2 * sh));
      if (u & 4) y[i].hmask[l] = static_cast<uint8_t>(y[i].hmask[l] | 1 << (4 * h + sh));
    }
  }
}

void QuantQ6_K(const float* x, size_t nb, BlockQ6_K* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    int8_t S[kQK_K];
    int s[16];
    SymSuperBlock(x, 16, 16, -32, 31, -128, 127, &y[i].d, s, S);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<int8_t>(s[j]);
    std::memset(y[i].ql, 0, sizeof y[i].ql);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int base = 128 * h;
        const int q1 = S[base + l] + 32, q2 = S[base + 32 + l] + 32;
        const int q3 = S[base + 64 + l] + 32, q4 = S[base + 96 + l] + 32;
        y[i].ql[64 * h + l] = static_cast<uint8_t>((q1 & 15) | (q3 & 15) << 4);
        y[i].ql[64 * h + 32 + l] = static_cast<uint8_t>((q2 & 15) | (q4 & 15) << 4);
        y[i].qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 |
                                                   (q4 >> 4) << 6);
      }
    }
  }
}

void QuantIQ4_XS(const float* x, size_t nb, BlockIQ4_XS* y) {
  for (size_t i = 0; i < nb; ++i, x += kQK_K) {
    float a[8];
    float amax = 0;
    uint8_t L[kQK_K];
    for (int j = 0; j < 8; ++j) {
      FitIQ4(x + 32 * j, 32, &a[j], L + 32 * j);
      if (std::fabs(a[j]) > std::fabs(amax)) amax = a[j];
    }
    y[i].d = F32ToF16(amax / -32.0f);
    const float d = F16ToF32(y[i].d);
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    uint8_t trial[32];
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + 32 * j;
      const int s0 = d != 0.0f ? Clamp(Nint(a[j] / d), -32, 31) : 0;
      double best = std::numeric_limits<double>::infinity();
      int bs = s0;
      for (int s = std::max(-32, s0 - 1); s <= std::min(31, s0 + 1); ++s) {
        const double err = IQ4Codes(xj, 32, d * static_cast<float>(s), trial);
        if (err < best) {
          best = err;
          bs = s;
          std::memcpy(L + 32 * j, trial, 32);
        }
      }
      const int ls = bs + 32;
      y[i].scales_l[j / 2] = static_cast<uint8_t>(y[i].scales_l[j / 2] | (ls & 15) << (4 * (j % 2)));
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((ls >> 4) & 3) << (2 * j));
      PackNibbles(L + 32 * j, y[i].qs + 16 * j);
    }
  }
}

}  // namespace

Status QuantizeBlocks(uint32_t ggml_type, const float* x, size_t nb, uint8_t* dst) {
  switch (static_cast<GgmlType>(ggml_type)) {
#define KVTIER_CASE(T, B, F) \
  case GgmlType::T: F(x, nb, reinterpret_cast<B*>(dst)); return Status::OK();
    KVTIER_CASE(kQ4_1, BlockQ4_1, QuantQ4_1)
    KVTIER_CASE(kQ5_0, BlockQ5_0, QuantQ5_0)
    KVTIER_CASE(kQ5_1, BlockQ5_1, QuantQ5_1)
    KVTIER_CASE(kIQ4_NL, BlockIQ4_NL, QuantIQ4_NL)
    KVTIER_CASE(kQ2_K, BlockQ2_K, QuantQ2_K)
    KVTIER_CASE(kQ3_K, BlockQ3_K, QuantQ3_K)
    KVTIER_CASE(kQ4_K, BlockQ4_K, QuantQ4_K)
    KVTIER_CASE(kQ5_K, BlockQ5_K, QuantQ5_K)
    KVTIER_CASE(kQ6_K, BlockQ6_K, QuantQ6_K)
    KVTIER_CASE(kIQ4_XS, BlockIQ4_XS, QuantIQ4_XS)
#undef KVTIER_CASE
    default:
      return Status::Unimplemented("quantizing to " + GgmlTypeName(ggml_type) +
                                   " is not supported");
  }
}

}  // namespace kvtier::weights
