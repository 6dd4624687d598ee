// A float64 reference of the forward pass, for tests: one sequence recomputed from scratch
// with dense causal attention, weights dequantized by the scalar reference decoders and read
// straight from the GGUF file by name (independent of Model's binding). K and V rows pass
// through the cache's formats (quantize + dequantize, reference) so that the comparison with
// a quantized cache measures only the kernels' error. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/format.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/status.h"

namespace kvtier::model {

//   logits [tokens.size(), n_vocab] (every position)
Status ForwardRef(const GgufFile& f, const ModelConfig& c, std::span<const int32_t> tokens,
                  const Format& k_format, const Format& v_format, std::vector<double>* logits);

// qwen35 (qwen35_ref.cc): Gated DeltaNet layers from a zero state and gated full-attention
// layers over float64 K/V.
//   logits [tokens.size(), n_vocab] (every position)
Status ForwardQwen35Ref(const GgufFile& f, const ModelConfig& c, std::span<const int32_t> tokens,
                        std::vector<double>* logits);

// The two references' weight loaders (model_ref.cc). Tensor `name` of `f` dequantized by the
// scalar reference decoder (any kvtier/weights.h type), as doubles: [n_out][n_in] (a 1-D
// tensor is one row); NotFound naming a missing tensor.
Result<std::vector<double>> Dense(const GgufFile& f, const std::string& name, size_t* n_in,
                                  size_t* n_out);
Result<std::vector<double>> Dense(const GgufFile& f, const std::string& name);
// y[t] = W x[t] for the weight `name`:  x [n, n_in] -> y [n, n_out]
Result<std::vector<double>> Apply(const GgufFile& f, const std::string& name,
                                  const std::vector<double>& x, size_t n);

}  // namespace kvtier::model
