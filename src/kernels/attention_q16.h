// The int16 q.k path (attention_q16.cc): decode and small prefill items on quantized K and V on
// every SIMD target with 4 to 16 float lanes, where the int8 (AVX-512 VNNI) path does not run.
// The query is quantized once per item to int16 (one scale per K block or affine group) and
// q.k runs on the K codes widened to int16 (pairwise multiply-adds into int32); V is
// accumulated in f32 with its block scales folded into the softmax weights. Internal to
// src/kernels; its entry point is in paths.h and dispatch.cc says when it runs. Served: K and V
// q8_0, q4_0 (alike, or K q8_0 / V q4_0), affine8 / affine4 with groups of 32 or more (K and V
// alike, one scale dtype); head_dim 64, 96, 128, 256. Output error against the float64
// reference on dequantized K/V: relative error < 1e-4 (docs/kernels.md states the bound;
// attention_test.cc tests it).
#pragma once

namespace kvtier::attn {

// Whether calls may take the int16 path (default: on). Tests turn it off to check the exact
// f32 paths; thread-safe (an atomic flag).
void SetInt16QkEnabled(bool on);
bool Int16QkEnabled();

}  // namespace kvtier::attn
