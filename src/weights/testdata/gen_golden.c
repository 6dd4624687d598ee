/* Golden-data generator for src/weights (not built by kvtier's CMake; see README.md).
 * Quantizes seeded inputs with ggml's own quantizer (ggml_quantize_chunk, no importance
 * matrix) and dequantizes the blocks with ggml's to_float, writing one <type>.golden each.
 * Build against a llama.cpp build:
 *   gcc -O1 gen_golden.c -I$LLAMA/ggml/include -L$BUILD/bin -lggml-base -lm -o gen_golden
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint64_t g_state;
static uint64_t next_u64(void) { /* xorshift64* */
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 2685821657736338717ull;
}
static double uniform01(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }
static double normal(void) {
  double u = uniform01(), v = uniform01();
  if (u < 1e-300) u = 1e-300;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

enum { kSegment = 256, kSegments = 6, kValues = kSegment * kSegments };

/* Segment s of the input: the distribution the quantizer is exercised on. */
static float sample(int s, int i) {
  switch (s) {
    case 0: return (float)normal();                                   /* N(0, 1) */
    case 1: return (float)(0.05 * (2.0 * uniform01() - 1.0));        /* U(-0.05, 0.05) */
    case 2: {                                                         /* N(0, .02) + 2% x30 */
      double x = 0.02 * normal();
      return (float)(uniform01() < 0.02 ? 30.0 * x : x);
    }
    case 3: return uniform01() < 0.5 ? 0.0f : (float)normal();        /* half exact zeros */
    case 4: return i < 128 ? 0.0f : (float)(1e-5 * normal());         /* zeros, then tiny */
    default: return (float)exp(normal());                             /* all positive, skewed */
  }
}

int main(int argc, char** argv) {
  const char* out_dir = argc > 1 ? argv[1] : ".";
  const enum ggml_type types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                  GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_IQ4_XS};
  ggml_quantize_init(GGML_TYPE_IQ4_XS);
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); ++t) {
    const enum ggml_type type = types[t];
    g_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)(42 + type);
    ggml_fp16_t in16[kValues];
    float in[kValues], out[kValues];
    for (int s = 0; s < kSegments; ++s) {
      for (int i = 0; i < kSegment; ++i) {
        /* inputs are f16-representable, so the file can store them as f16 exactly */
        in16[s * kSegment + i] = ggml_fp32_to_fp16(sample(s, i));
        in[s * kSegment + i] = ggml_fp16_to_fp32(in16[s * kSegment + i]);
      }
    }
    const uint32_t bv = (uint32_t)ggml_blck_size(type), bb = (uint32_t)ggml_type_size(type);
    const uint32_t nb = kValues / bv;
    uint8_t* blocks = malloc((size_t)nb * bb);
    /* one row of kSegment values per segment, as a weight matrix [kSegments][kSegment] */
    ggml_quantize_chunk(type, in, blocks, 0, kSegments, kSegment, NULL);
    ggml_get_type_traits(type)->to_float(blocks, out, kValues);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.golden", out_dir, ggml_type_name(type));
    FILE* f = fopen(path, "wb");
    const uint32_t hdr[4] = {(uint32_t)type, nb, bv, bb};
    fwrite("KVWGOLD1", 1, 8, f);
    fwrite(hdr, 4, 4, f);
    fwrite(in16, 2, kValues, f);
    fwrite(blocks, bb, nb, f);
    fwrite(out, 4, kValues, f);
    fclose(f);
    free(blocks);
    printf("%s: %u blocks\n", path, nb);
  }
  return 0;
}
