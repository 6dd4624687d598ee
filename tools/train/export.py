#!/usr/bin/env python3
"""GGUF export of models.Model with llama.cpp's keys and tensor names for each family (the
names of llama.cpp's gguf-py constants and src/models/*.cpp loaders at 3f545be, the same that
`kvtier make-test-model --arch X` writes).

Types: 2-D weight matrices f16; norms, qwen35's ssm_a / ssm_dt.bias and ssm_conv1d f32 (the
converter keeps the conv f32; kvtier requires it). A PyTorch Linear weight (out, in) is
written with GGUF dims [in, out] (innermost first): the same row-major bytes.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import gguf_writer as gw  # noqa: E402


def rope_sections(rope_dims):
    """qwen35's rope.dimension_sections for text (every section gets the same position, so
    only the sum, rope_dims / 2, matters): the make-test-model split."""
    half = rope_dims // 2
    third = half // 3
    return [half - 2 * third, third, third, 0]


def export_gguf(model, tok, cfg, path, name, add_bos):
    a = cfg["arch"]
    w = gw.GGUFWriter()
    w.add_string("general.architecture", a)
    w.add_string("general.name", name)
    w.add_u32("general.file_type", gw.FTYPE_MOSTLY_F16)
    w.add_u32("general.quantization_version", 2)
    w.add_u32(a + ".context_length", cfg["ctx"])
    w.add_u32(a + ".embedding_length", cfg["hidden"])
    w.add_u32(a + ".block_count", cfg["layers"])
    w.add_u32(a + ".feed_forward_length", cfg["ffn"])
    w.add_u32(a + ".attention.head_count", cfg["heads"])
    w.add_u32(a + ".attention.head_count_kv", cfg["kv_heads"])
    w.add_u32(a + ".attention.key_length", cfg["head_dim"])
    w.add_u32(a + ".attention.value_length", cfg["head_dim"])
    w.add_f32(a + ".rope.freq_base", float(cfg["rope_theta"]))
    w.add_u32(a + ".rope.dimension_count", cfg["rope_dims"])
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", float(cfg["eps"]))
    w.add_u32(a + ".vocab_size", cfg["vocab"])
    if a == "gemma3" and cfg["window"] > 0:
        w.add_u32(a + ".attention.sliding_window", cfg["window"])
        w.add_u32(a + ".attention.sliding_window_pattern", cfg["swa_period"])
        w.add_f32(a + ".rope.freq_base_swa", float(cfg["rope_theta_swa"]))
    if a == "qwen35":
        w.add_array(a + ".rope.dimension_sections", gw.T_INT32, rope_sections(cfg["rope_dims"]))
        w.add_u32(a + ".full_attention_interval", cfg["full_every"])
        w.add_u32(a + ".ssm.conv_kernel", cfg["conv_k"])
        w.add_u32(a + ".ssm.state_size", cfg["ssm_state"])
        w.add_u32(a + ".ssm.group_count", cfg["ssm_k_heads"])
        w.add_u32(a + ".ssm.time_step_rank", cfg["ssm_v_heads"])
        w.add_u32(a + ".ssm.inner_size", cfg["ssm_v_heads"] * cfg["ssm_state"])
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-2")
    w.add_array("tokenizer.ggml.tokens", gw.T_STRING, tok.tokens)
    w.add_array("tokenizer.ggml.token_type", gw.T_INT32,
                [3 if t == bpe.EOT else 1 for t in tok.tokens])  # 1 normal, 3 control
    w.add_array("tokenizer.ggml.merges", gw.T_STRING, [x + " " + y for x, y in tok.merges])
    w.add_u32("tokenizer.ggml.bos_token_id", tok.eot_id)
    w.add_u32("tokenizer.ggml.eos_token_id", tok.eot_id)
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", False)

    def add(tname, t, f32=False):
        arr = t.detach().float().cpu().numpy()
        data = arr.astype(np.float32 if f32 else np.float16).tobytes()
        w.add_tensor(tname, list(arr.shape), gw.GGML_F32 if f32 else gw.GGML_F16, data)

    add("token_embd.weight", model.embd.weight)  # (vocab, hidden) -> ne [hidden, vocab]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        add(p + "attn_norm.weight", b.attn_norm.weight, True)
        if a == "qwen35":
            if b.full:
                add(p + "attn_q.weight", b.wq.weight)
                add(p + "attn_k.weight", b.wk.weight)
                add(p + "attn_v.weight", b.wv.weight)
                add(p + "attn_q_norm.weight", b.q_norm.weight, True)
                add(p + "attn_k_norm.weight", b.k_norm.weight, True)
                add(p + "attn_output.weight", b.wo.weight)
            else:
                add(p + "attn_qkv.weight", b.wqkv.weight)
                add(p + "attn_gate.weight", b.w_z.weight)
                add(p + "ssm_conv1d.weight", b.conv, True)  # (conv_dim, K) -> ne [K, conv_dim]
                add(p + "ssm_dt.bias", b.dt_bias, True)
                add(p + "ssm_a", -b.a_log.exp(), True)
                add(p + "ssm_beta.weight", b.w_beta.weight)
                add(p + "ssm_alpha.weight", b.w_alpha.weight)
                add(p + "ssm_norm.weight", b.ssm_norm.weight, True)
                add(p + "ssm_out.weight", b.ssm_out.weight)
            add(p + "post_attention_norm.weight", b.post_attn_norm.weight, True)
            add(p + "ffn_gate.weight", b.w_gate.weight)
            add(p + "ffn_up.weight", b.w_up.weight)
            add(p + "ffn_down.weight", b.w_down.weight)
            continue
        if a == "phi3":
            add(p + "attn_qkv.weight", b.wqkv.weight)
        else:
            add(p + "attn_q.weight", b.wq.weight)
            add(p + "attn_k.weight", b.wk.weight)
            add(p + "attn_v.weight", b.wv.weight)
        if a == "gemma3":
            add(p + "attn_q_norm.weight", b.q_norm.weight, True)
            add(p + "attn_k_norm.weight", b.k_norm.weight, True)
        add(p + "attn_output.weight", b.wo.weight)
        if a == "gemma3":
            add(p + "post_attention_norm.weight", b.post_attn_norm.weight, True)
        add(p + "ffn_norm.weight", b.ffn_norm.weight, True)
        if a == "phi3":
            add(p + "ffn_up.weight", b.w_gate_up.weight)  # rows: gate, then up
        else:
            add(p + "ffn_gate.weight", b.w_gate.weight)
            add(p + "ffn_up.weight", b.w_up.weight)
        add(p + "ffn_down.weight", b.w_down.weight)
        if a == "gemma3":
            add(p + "post_ffw_norm.weight", b.post_ffw_norm.weight, True)
    add("output_norm.weight", model.norm.weight, True)
    if model.output is not None:
        add("output.weight", model.output.weight)
    return w.write(path)
