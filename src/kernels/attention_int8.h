// The int8 q.k path (attention_int8.cc): the query is quantized once per item into two int8
// planes (one scale per 32 values) and q.k runs on the K codes with AVX-512 VNNI dot products.
// Internal to src/kernels; its entry point is in paths.h and dispatch.cc says when it runs.
// Served: K q8_0, q4_0, affine8 and affine4 (f16 scales, groups of 32 or more), V the same
// formats (the pair table in dispatch.h), head_dim 64, 128 and 256. Output error against the
// float64 reference on dequantized K/V: relative error < 1e-3 with 8-bit V, < 1e-2 with 4-bit
// V (whose softmax weights are rounded to int8; docs/kernels.md states the bounds;
// attention_test.cc tests them).
#pragma once

namespace kvtier::attn {

// Whether calls may take the int8 path where it applies (default: on). Tests turn it off to
// check the exact f32 paths; thread-safe (an atomic flag).
void SetInt8QkEnabled(bool on);
bool Int8QkEnabled();

// True when this CPU has AVX-512 with VNNI and the path is compiled in (its only requirements
// besides the format).
bool Int8QkAvailable();

}  // namespace kvtier::attn
