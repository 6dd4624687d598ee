// `kvtier make-test-model` flags and run (see make_test_model.h).
#include "cli/make_test_model.h"

#include <CLI/CLI.hpp>
#include <ostream>

#include "base/strings.h"

namespace kvtier::cli {

CLI::App* AddMakeTestModel(CLI::App& app, MakeTestModelFlags* f) {
  TestModelConfig& c = f->config;
  CLI::App* m = app.add_subcommand(
      "make-test-model",
      "Write a seeded random llama/qwen2/qwen3 model as GGUF (llama.cpp names and keys, "
      "byte-level BPE tokenizer); defaults: Qwen3-0.6B's shape");
  m->add_option("--out", f->out, "Output GGUF file")->required();
  m->add_option("--arch", c.arch, "llama, qwen2 or qwen3")->capture_default_str();
  m->add_option("--hidden", c.hidden, "Embedding length")->capture_default_str();
  m->add_option("--layers", c.layers, "Blocks")->capture_default_str();
  m->add_option("--heads", c.heads, "Query heads")->capture_default_str();
  m->add_option("--kv-heads", c.kv_heads, "KV heads")->capture_default_str();
  m->add_option("--head-dim", c.head_dim, "Head dimension")->capture_default_str();
  m->add_option("--ffn", c.ffn, "Feed-forward length")->capture_default_str();
  m->add_option("--vocab", c.vocab, "Vocabulary size (at least 259)")->capture_default_str();
  m->add_option("--ctx", c.ctx, "Context length")->capture_default_str();
  m->add_option("--rope-theta", c.rope_theta, "RoPE base frequency")->capture_default_str();
  m->add_option("--weight-type", f->weight_type, "f16, bf16, f32, q8_0 or q4_0")
      ->capture_default_str();
  m->add_flag("--tied", c.tied, "Output projection shares token_embd (default)");
  m->add_flag("--no-tied", f->no_tied, "Write a separate output.weight");
  m->add_option("--seed", c.seed, "Seed of the weights")->capture_default_str();
  m->add_option("--name", c.name, "general.name (default kvtier-test-<arch>)");
  return m;
}

Status RunMakeTestModel(MakeTestModelFlags f, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(f.config.weight_type, ParseTestModelWeightType(f.weight_type));
  if (f.no_tied) f.config.tied = false;
  KVTIER_RETURN_IF_ERROR(ValidateTestModelConfig(f.config));
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, BuildTestModel(f.config));
  KVTIER_RETURN_IF_ERROR(w.WriteFile(f.out));
  out << "wrote " << f.out << ": " << f.config.arch << ", " << f.config.layers << " layers, "
      << DescribeBytes(TestModelTensorBytes(f.config)) << " of " << f.weight_type
      << " weights\n";
  return Status::OK();
}

}  // namespace kvtier::cli
