// Which attention path runs a call: the one (K, V) pair table, the CPU features the choice
// depends on, SelectAttentionKernel (chosen once per call by the driver and carried in the
// Job). The path table the driver runs items through is in paths.h. Internal to src/kernels.
//
// Paths (one file each; none calls another):
//   kInt8     attention_int8.cc     quantized K/V, int8 q.k with AVX-512 VNNI (decode and prefill;
//                                   rot pairs with VBMI too)
//   kQ16      attention_q16.cc      quantized K/V, int16 q.k on 4..16-lane targets (decode; and
//                                   prefill below 8 lanes)
//   kFast     attention_fast.cc     rows decoded in registers, f32 (decode)
//   kPrefill  attention_prefill.cc  query vectors in lanes, f32 (prefill items, 8+ lanes)
//   kGeneric  attention_generic.cc  rows decoded to f32 tiles by quant's row decoders: every
//                                   format and head_dim, every target
//   kChan     attention_chan.cc     chan K read in place with AVX-512 VNNI (decode and prefill;
//                                   ChanPathServes says which pairs)
// A path serves a pair when its bit is in the pair's row below and the extra conditions of
// SelectAttentionKernel (head_dim, lanes, scale dtypes, switches) hold; kGeneric serves the rest.
// Thread-safe: pure functions and constants, apart from the test switches (atomics).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "kvtier/format.h"
#include "quant/format_traits.h"

namespace kvtier::attn {

enum class Path : uint8_t { kNone, kInt8, kQ16, kFast, kPrefill, kGeneric, kChan };
inline constexpr size_t kNumPaths = 7;
const char* PathName(Path p);

// Path bits of the pair table (kGeneric needs none; kPrefill goes with kFast).
inline constexpr uint8_t kServeInt8 = 1, kServeQ16 = 2, kServeFast = 4;

// The one pair table: every (K, V) code pair a specialised path instantiates.
struct PairRow {
  KvCode k, v;
  uint8_t paths;
};
inline constexpr PairRow kPairTable[] = {
    {KvCode::kF16, KvCode::kF16, kServeFast},
    {KvCode::kBF16, KvCode::kBF16, kServeFast},
    {KvCode::kF32, KvCode::kF32, kServeFast},
    {KvCode::kQ8_0, KvCode::kQ8_0, kServeInt8 | kServeQ16 | kServeFast},
    {KvCode::kQ4_0, KvCode::kQ4_0, kServeInt8 | kServeQ16 | kServeFast},
    {KvCode::kQ8_0, KvCode::kQ4_0, kServeInt8 | kServeQ16 | kServeFast},
    {KvCode::kAffine8, KvCode::kAffine8, kServeInt8 | kServeQ16 | kServeFast},
    {KvCode::kAffine4, KvCode::kAffine4, kServeInt8 | kServeQ16 | kServeFast},
    {KvCode::kRot4, KvCode::kRot4, kServeInt8 | kServeFast},
    {KvCode::kRot3, KvCode::kRot3, kServeInt8 | kServeFast},
    {KvCode::kRot2, KvCode::kRot2, kServeInt8 | kServeFast},
};
inline constexpr size_t kNumPairs = sizeof(kPairTable) / sizeof(kPairTable[0]);

// The pair table's bits for (k, v); 0 when the pair has no row.
constexpr uint8_t PairPaths(KvCode k, KvCode v) {
  for (const PairRow& r : kPairTable) {
    if (r.k == k && r.v == v) return r.paths;
  }
  return 0;
}

// Calls f.template operator()<K, V>() for the row (k, v) when it carries kPath, and returns
// whether it did: each path instantiates its kernels for exactly its rows of the table.
template <uint8_t kPath, size_t I, class F>
bool VisitPairRow(KvCode k, KvCode v, F& f) {
  constexpr PairRow r = kPairTable[I];
  if constexpr ((r.paths & kPath) != 0) {
    if (r.k == k && r.v == v) {
      f.template operator()<r.k, r.v>();
      return true;
    }
  }
  return false;
}
template <uint8_t kPath, class F, size_t... I>
bool VisitPairImpl(KvCode k, KvCode v, F& f, std::index_sequence<I...>) {
  return (VisitPairRow<kPath, I>(k, v, f) || ...);
}
template <uint8_t kPath, class F>
bool VisitPair(KvCode k, KvCode v, F&& f) {
  return VisitPairImpl<kPath>(k, v, f, std::make_index_sequence<kNumPairs>());
}

// What the choice depends on besides the formats: the Highway target the paths dispatch to
// (Highway picks the same one in every file) and the switches.
struct CpuFeatures {
  size_t float_lanes = 1;   // f32 lanes of the dispatched target
  bool x86_avx3 = false;    // the dispatched target is an AVX-512 one
  bool vnni = false;        // AVX-512 VNNI present and the int8 path compiled in
  bool vbmi = false;        // and AVX-512 VBMI (the int8 path's rot formats)
  bool int8_enabled = true, q16_enabled = true, fast_enabled = true;  // test switches
};
CpuFeatures DetectCpuFeatures();

// Prefill items (decided per item by the driver): with 8 or more lanes, a row of more than one
// query token whose item holds 8 to PrefillLaneVectors x lanes query vectors.
constexpr size_t PrefillLaneVectors(size_t lanes) { return lanes >= 16 ? 1 : 2; }

struct KernelChoice {
  Path decode = Path::kNone;   // what decode items run
  Path prefill = Path::kNone;  // what prefill items run (== decode below 8 lanes)
  KvCode k = KvCode::kOther, v = KvCode::kOther;
  DType scale_dtype = DType::kF16;  // affine K and V (the paths that template on it)
  uint32_t head_dim = 0;
  size_t lanes = 1;            // CpuFeatures::float_lanes
};

// The path for decode and for prefill items of a call with these formats on this CPU.
// kGeneric when no specialised path serves them; kNone only for a head_dim without kernels.
KernelChoice SelectAttentionKernel(const Format& k, const Format& v, uint32_t head_dim,
                                   const CpuFeatures& cpu);

// Test / benchmark switch: whether kFast and kPrefill may be chosen (default on; off sends
// their pairs to the next path, kGeneric for plain formats). Thread-safe (an atomic flag).
void SetFastPathEnabled(bool on);
bool FastPathEnabled();
// Likewise for the int8 path (kInt8: off sends its pairs to kQ16, kFast or kGeneric; the
// exact-path tests turn it off) and the int16 path (kQ16).
void SetInt8QkEnabled(bool on);
bool Int8QkEnabled();
void SetInt16QkEnabled(bool on);
bool Int16QkEnabled();

// True when this CPU has AVX-512 with VNNI and the int8 path is compiled in (its only
// requirements besides the format). Defined beside the path, in attention_int8.cc.
bool Int8QkAvailable();
// Int8QkAvailable() and AVX-512 VBMI (vpmultishiftqb, vpermb), which the rot formats need there.
bool Int8RotAvailable();

std::string TargetName();

// Whether the chan path (attention_chan.cc) serves K k (chan) with V v at head_dim on this CPU
// (AVX-512 VNNI and the int8 switch; VBMI for 3- / 2-bit K and rot V).
bool ChanPathServes(const Format& k, const Format& v, uint32_t head_dim, const CpuFeatures& cpu);

}  // namespace kvtier::attn
