// SelectAttentionKernel, the CPU features it reads (the dispatched Highway target) and the
// path table the driver runs items through. See dispatch.h. Thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <atomic>

#include "kernels/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {

CpuFeatures TargetFeaturesImpl() {
  CpuFeatures c;
  c.float_lanes = HWY_LANES(float);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  c.x86_avx3 = true;
#endif
  return c;
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {
namespace {
std::atomic<bool> g_fast_enabled{true};
std::atomic<bool> g_int8_enabled{true};
std::atomic<bool> g_q16_enabled{true};
}  // namespace

HWY_EXPORT(TargetFeaturesImpl);
HWY_EXPORT(TargetNameImpl);

void SetFastPathEnabled(bool on) { g_fast_enabled.store(on, std::memory_order_relaxed); }
bool FastPathEnabled() { return g_fast_enabled.load(std::memory_order_relaxed); }
void SetInt8QkEnabled(bool on) { g_int8_enabled.store(on, std::memory_order_relaxed); }
bool Int8QkEnabled() { return g_int8_enabled.load(std::memory_order_relaxed); }
void SetInt16QkEnabled(bool on) { g_q16_enabled.store(on, std::memory_order_relaxed); }
bool Int16QkEnabled() { return g_q16_enabled.load(std::memory_order_relaxed); }

std::string TargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

const char* PathName(Path p) {
  switch (p) {
    case Path::kNone: return "none";
    case Path::kInt8: return "int8";
    case Path::kQ16: return "q16";
    case Path::kFast: return "fast";
    case Path::kPrefill: return "prefill";
    case Path::kGeneric: return "generic";
    case Path::kChan: return "chan";
  }
  return "?";
}

CpuFeatures DetectCpuFeatures() {
  CpuFeatures c = HWY_DYNAMIC_DISPATCH(TargetFeaturesImpl)();
  c.vnni = Int8QkAvailable();
  c.vbmi = Int8RotAvailable();
  c.int8_enabled = Int8QkEnabled();
  c.q16_enabled = Int16QkEnabled();
  c.fast_enabled = FastPathEnabled();
  return c;
}

namespace {

bool OneOf(uint32_t d, std::initializer_list<uint32_t> ds) {
  for (uint32_t x : ds) {
    if (x == d) return true;
  }
  return false;
}

// Affine formats a quantized-query path reads: groups of at least one 32-value sub-block.
bool WholeSubBlocks(const Format& f) {
  return f.kind != FormatKind::kAffine || f.group >= kQBlockValues;
}

bool Int8Serves(const Format& k, const Format& v, uint32_t d, const CpuFeatures& cpu) {
  if (!cpu.x86_avx3 || !cpu.vnni || !cpu.int8_enabled || !OneOf(d, {64, 128, 256})) return false;
  if ((PairPaths(CodeOf(k), CodeOf(v)) & kServeInt8) == 0) return false;
  if ((k.is_rotated() || v.is_rotated()) && !cpu.vbmi) return false;
  auto ok = [](const Format& f) {  // f16 scales only (its scale loads convert halves)
    return f.kind != FormatKind::kAffine || (f.scale_dtype == DType::kF16 && WholeSubBlocks(f));
  };
  return ok(k) && ok(v);
}

bool Q16Serves(const Format& k, const Format& v, uint32_t d, const CpuFeatures& cpu) {
  if (cpu.float_lanes < 4 || cpu.float_lanes > 16 || !cpu.q16_enabled || !OneOf(d, {64, 96, 128, 256})) {
    return false;
  }
  if ((PairPaths(CodeOf(k), CodeOf(v)) & kServeQ16) == 0) return false;
  if (!WholeSubBlocks(k) || !WholeSubBlocks(v)) return false;
  return k.kind != FormatKind::kAffine || k.scale_dtype == v.scale_dtype;
}

bool FastServes(const Format& k, const Format& v, uint32_t d, const CpuFeatures& cpu) {
  // Chunks of N values, 4 query vectors x N / 4 tokens per score batch, V chunks in pairs.
  const size_t n = cpu.float_lanes;
  if (!cpu.fast_enabled || n % 4 != 0 || !OneOf(d, {64, 128, 256}) || (d / n) % 4 != 0) return false;
  if ((PairPaths(CodeOf(k), CodeOf(v)) & kServeFast) == 0) return false;
  return k.kind != FormatKind::kAffine || k.scale_dtype == v.scale_dtype;
}

}  // namespace

KernelChoice SelectAttentionKernel(const Format& k, const Format& v, uint32_t head_dim,
                                   const CpuFeatures& cpu) {
  KernelChoice c;
  c.k = CodeOf(k);
  c.v = CodeOf(v);
  c.scale_dtype = k.scale_dtype;
  c.head_dim = head_dim;
  c.lanes = cpu.float_lanes;
  if (!OneOf(head_dim, {64, 80, 96, 128, 256})) return c;  // kNone
  if (ChanPathServes(k, v, head_dim, cpu)) {
    c.decode = c.prefill = Path::kChan;
    return c;
  }
  const bool int8 = Int8Serves(k, v, head_dim, cpu);
  const bool q16 = Q16Serves(k, v, head_dim, cpu);
  const bool fast = FastServes(k, v, head_dim, cpu);
  c.decode = int8 ? Path::kInt8 : q16 ? Path::kQ16 : fast ? Path::kFast : Path::kGeneric;
  if (cpu.float_lanes >= 8) {
    c.prefill = int8 ? Path::kInt8 : fast ? Path::kPrefill : Path::kGeneric;
  } else {
    c.prefill = c.decode;
  }
  return c;
}

}  // namespace kvtier::attn
#endif  // HWY_ONCE
