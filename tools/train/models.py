#!/usr/bin/env python3
"""PyTorch forwards of the GGUF families kvtier reads, written to match llama.cpp's graphs
(src/models/llama.cpp, gemma3.cpp, phi3.cpp, qwen35.cpp + delta-net-base.cpp at 3f545be) and
kvtier's docs/model.md, so that an exported file scores the same in PyTorch, llama.cpp and
kvtier. Shapes are written [B, T, ...] (batch, time).

- llama:  x += wo(attn(RMSNorm x)); x += down(silu(gate h) * up h); RoPE on adjacent pairs
          (llama.cpp's NORMAL mode), tied output head.
- gemma3: x = embd * sqrt(hidden); per layer RMSNorm -> q/k/v -> per-head q/k RMSNorm -> NeoX
          RoPE (theta_swa on window layers, theta on global ones) -> attention (window layers
          see the last `window` positions, themselves included) -> wo -> post_attention_norm
          -> residual; ffn_norm -> down(gelu_tanh(gate h) * up h) -> post_ffw_norm ->
          residual. Layer l is a window layer when l % swa_period < swa_period - 1. Plain
          RMSNorm weights (what the converter writes after adding gemma's 1).
- phi3:   llama's block with one fused qkv matrix (rows q, k, v), one ffn_up of 2 x ffn rows
          (gate, then up), NeoX RoPE, an untied output head.
- qwen35: layer l is gated full attention when (l + 1) % full_every == 0, else Gated DeltaNet.
          Attention: attn_q gives per head a query then a gate; q/k RMSNorm; NeoX RoPE on the
          first rope_dims dims; out * sigmoid(gate) -> wo. DeltaNet: qkv -> causal depthwise
          conv (conv_k taps, zero history) -> SiLU -> q, k L2-normalised (x / max(|x|, eps));
          v head h reads q/k head h % k_heads (ggml_repeat tiles); beta = sigmoid(w_beta h),
          g = softplus(w_alpha h + dt_bias) * a with a = -exp(A_log); per token, state M
          [S_v, S_k]: M = exp(g) M; d = (v - M k) beta; M += d k^T; o = M q / sqrt(S) (a naive
          per-token recurrence in f32). o -> RMSNorm(ssm_norm) * silu(w_gate h) -> ssm_out.
          post_attention_norm is the norm before the SwiGLU FFN.

Ownership: plain nn.Modules; not thread-safe (PyTorch modules).
"""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# name -> shape and training presets; train.py --preset NAME applies them (flags override).
PRESETS = {
    "kvtier-austen-30m": dict(arch="llama", hidden=512, layers=8, heads=4, kv_heads=2,
                              head_dim=128, ffn=1536, seq=2048, batch=8),
    "kvtier-hd64": dict(arch="llama", hidden=512, layers=8, heads=8, kv_heads=2, head_dim=64,
                        ffn=1536, seq=2048, batch=8),
    "kvtier-tiny-gemma3": dict(arch="gemma3", hidden=256, layers=6, heads=4, kv_heads=1,
                               head_dim=64, ffn=1024, seq=512, batch=32, window=128,
                               swa_period=6, rope_theta=1e6, rope_theta_swa=1e4, warmup=200),
    "kvtier-tiny-phi3": dict(arch="phi3", hidden=256, layers=6, heads=4, kv_heads=2,
                             head_dim=64, ffn=768, seq=512, batch=32, tied=0, warmup=200),
    "kvtier-tiny-qwen35": dict(arch="qwen35", hidden=256, layers=4, heads=4, kv_heads=2,
                               head_dim=64, ffn=768, seq=512, batch=96, rope_theta=1e6,
                               ssm_k_heads=2, ssm_v_heads=4, conv_k=4, full_every=4,
                               warmup=20, lr=2e-3, sample_tokens=0),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rope_tables(seq, rot_dims, theta):
    """cos, sin [seq, rot_dims / 2]: angle pos * theta^(-2i / rot_dims)."""
    inv = theta ** (-torch.arange(0, rot_dims, 2, dtype=torch.float64) / rot_dims)
    ang = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def rope_normal(x, cos, sin):
    """x [B, H, T, D]: rotates adjacent pairs (x[2i], x[2i+1]) (llama.cpp NORMAL mode)."""
    xf = x.float()
    x0, x1 = xf[..., 0::2], xf[..., 1::2]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).type_as(x)


def rope_neox(x, cos, sin):
    """x [B, H, T, D]: rotates (x[i], x[i + n/2]) for i < n/2 with n = 2 * cos.shape[1] (the
    rotated part; dims n.. pass through): llama.cpp's NEOX mode, and its multi-section mode
    for text, where every section has the same position."""
    n = 2 * cos.shape[1]
    xf = x.float()
    x0, x1, rest = xf[..., : n // 2], xf[..., n // 2: n], xf[..., n:]
    c, s = cos[: x.shape[2]], sin[: x.shape[2]]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c, rest), dim=-1).type_as(x)


def attention(q, k, v, window=0):
    """q [B, H, T, D], k/v [B, Hkv, T, D]; causal; query head h reads KV head h // (H / Hkv);
    window > 0: position i sees j with i - window < j <= i. Scale 1/sqrt(D)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    T = q.shape[2]
    mask = None
    if window > 0 and window < T:
        i = torch.arange(T, device=q.device)
        d = i[:, None] - i[None, :]
        mask = (d >= 0) & (d < window)
    if hasattr(F, "scaled_dot_product_attention"):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])  # torch < 2.0
    if mask is None:
        i = torch.arange(T, device=q.device)
        mask = i[:, None] >= i[None, :]
    s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v.float()).type_as(q)


def no_autocast(x):
    return torch.autocast(x.device.type, enabled=False) if x.is_cuda else contextlib.nullcontext()


class AttnBlock(nn.Module):
    """llama / gemma3 / phi3 block (see the module comment)."""

    def __init__(self, cfg, layer):
        super().__init__()
        d, hd, a = cfg["hidden"], cfg["head_dim"], cfg["arch"]
        self.arch, self.nh, self.nkv, self.hd = a, cfg["heads"], cfg["kv_heads"], hd
        self.drop, eps = cfg["dropout"], cfg["eps"]
        self.window = 0
        if a == "gemma3" and cfg["window"] > 0:
            p = cfg["swa_period"]
            self.window = cfg["window"] if layer % p < p - 1 else 0
        self.rope_key = "swa" if self.window else "base"
        self.attn_norm = RMSNorm(d, eps)
        if a == "phi3":
            self.wqkv = nn.Linear(d, (self.nh + 2 * self.nkv) * hd, bias=False)
        else:
            self.wq = nn.Linear(d, self.nh * hd, bias=False)
            self.wk = nn.Linear(d, self.nkv * hd, bias=False)
            self.wv = nn.Linear(d, self.nkv * hd, bias=False)
        self.wo = nn.Linear(self.nh * hd, d, bias=False)
        if a == "gemma3":
            self.q_norm = RMSNorm(hd, eps)
            self.k_norm = RMSNorm(hd, eps)
            self.post_attn_norm = RMSNorm(d, eps)
            self.post_ffw_norm = RMSNorm(d, eps)
        self.ffn_norm = RMSNorm(d, eps)
        if a == "phi3":
            self.w_gate_up = nn.Linear(d, 2 * cfg["ffn"], bias=False)  # rows: gate, then up
        else:
            self.w_gate = nn.Linear(d, cfg["ffn"], bias=False)
            self.w_up = nn.Linear(d, cfg["ffn"], bias=False)
        self.w_down = nn.Linear(cfg["ffn"], d, bias=False)

    def forward(self, x, ropes):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        if self.arch == "phi3":
            qkv = self.wqkv(h)
            nq, nk = self.nh * self.hd, self.nkv * self.hd
            q, k, v = qkv[..., :nq], qkv[..., nq:nq + nk], qkv[..., nq + nk:]
        else:
            q, k, v = self.wq(h), self.wk(h), self.wv(h)
        q = q.reshape(B, T, self.nh, self.hd)
        k = k.reshape(B, T, self.nkv, self.hd)
        v = v.reshape(B, T, self.nkv, self.hd).transpose(1, 2)
        if self.arch == "gemma3":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = ropes[self.rope_key]
        rope = rope_normal if self.arch == "llama" else rope_neox
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = attention(q, k, v, self.window).transpose(1, 2).reshape(B, T, self.nh * self.hd)
        o = self.wo(a)
        if self.arch == "gemma3":
            o = self.post_attn_norm(o)
        x = x + F.dropout(o, self.drop, self.training)
        h = self.ffn_norm(x)
        if self.arch == "phi3":
            gu = self.w_gate_up(h)
            g, u = gu.chunk(2, dim=-1)
            f = self.w_down(F.silu(g) * u)
        elif self.arch == "gemma3":
            f = self.post_ffw_norm(self.w_down(F.gelu(self.w_gate(h), approximate="tanh")
                                               * self.w_up(h)))
        else:
            f = self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))
        return x + F.dropout(f, self.drop, self.training)


class Qwen35Block(nn.Module):
    """One qwen35 layer: gated full attention or Gated DeltaNet, then the SwiGLU FFN."""

    def __init__(self, cfg, layer):
        super().__init__()
        d, hd, eps = cfg["hidden"], cfg["head_dim"], cfg["eps"]
        self.full = (layer + 1) % cfg["full_every"] == 0
        self.nh, self.nkv, self.hd, self.eps = cfg["heads"], cfg["kv_heads"], hd, eps
        self.drop = cfg["dropout"]
        self.attn_norm = RMSNorm(d, eps)
        if self.full:
            self.wq = nn.Linear(d, 2 * self.nh * hd, bias=False)  # per head: query, then gate
            self.wk = nn.Linear(d, self.nkv * hd, bias=False)
            self.wv = nn.Linear(d, self.nkv * hd, bias=False)
            self.q_norm = RMSNorm(hd, eps)
            self.k_norm = RMSNorm(hd, eps)
            self.wo = nn.Linear(self.nh * hd, d, bias=False)
        else:
            S, nk, nv = cfg["ssm_state"], cfg["ssm_k_heads"], cfg["ssm_v_heads"]
            self.S, self.nk, self.nv = S, nk, nv
            conv_dim = 2 * nk * S + nv * S
            self.wqkv = nn.Linear(d, conv_dim, bias=False)
            self.w_z = nn.Linear(d, nv * S, bias=False)  # attn_gate
            self.conv = nn.Parameter(torch.empty(conv_dim, cfg["conv_k"]))  # [channel, tap]
            nn.init.uniform_(self.conv, -1 / math.sqrt(cfg["conv_k"]), 1 / math.sqrt(cfg["conv_k"]))
            self.dt_bias = nn.Parameter(torch.ones(nv))
            self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, nv)))
            self.w_beta = nn.Linear(d, nv, bias=False)
            self.w_alpha = nn.Linear(d, nv, bias=False)
            self.ssm_norm = RMSNorm(S, eps)
            self.ssm_out = nn.Linear(nv * S, d, bias=False)
        self.post_attn_norm = RMSNorm(d, eps)
        self.w_gate = nn.Linear(d, cfg["ffn"], bias=False)
        self.w_up = nn.Linear(d, cfg["ffn"], bias=False)
        self.w_down = nn.Linear(cfg["ffn"], d, bias=False)

    def attn(self, h, ropes):
        B, T, _ = h.shape
        qg = self.wq(h).reshape(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., : self.hd], qg[..., self.hd:]
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.wk(h).reshape(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.wv(h).reshape(B, T, self.nkv, self.hd).transpose(1, 2)
        cos, sin = ropes["base"]
        q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
        a = attention(q, k, v).transpose(1, 2)  # [B, T, H, D]
        a = a * torch.sigmoid(gate)
        return self.wo(a.reshape(B, T, self.nh * self.hd))

    def deltanet(self, h):
        B, T, _ = h.shape
        S, nk, nv = self.S, self.nk, self.nv
        qkv = self.wqkv(h)  # [B, T, conv_dim]
        z = self.w_z(h).reshape(B, T, nv, S)
        beta_in, alpha_in = self.w_beta(h), self.w_alpha(h)
        with no_autocast(h):
            K = self.conv.shape[1]
            xc = F.pad(qkv.float().transpose(1, 2), (K - 1, 0))  # [B, C, K - 1 + T]
            xc = F.silu(F.conv1d(xc, self.conv.float()[:, None, :], groups=xc.shape[1]))
            xc = xc.transpose(1, 2)  # [B, T, C]
            kd = nk * S
            q = xc[..., :kd].reshape(B, T, nk, S)
            k = xc[..., kd:2 * kd].reshape(B, T, nk, S)
            v = xc[..., 2 * kd:].reshape(B, T, nv, S)
            q = q / q.norm(dim=-1, keepdim=True).clamp_min(self.eps)
            k = k / k.norm(dim=-1, keepdim=True).clamp_min(self.eps)
            idx = torch.arange(nv, device=h.device) % nk  # v head h reads q/k head h % nk
            q, k = q[:, :, idx], k[:, :, idx]  # [B, T, nv, S]
            beta = torch.sigmoid(beta_in.float())  # [B, T, nv]
            g = F.softplus(alpha_in.float() + self.dt_bias.float()) * -torch.exp(self.a_log.float())
            decay = torch.exp(g)
            M = torch.zeros(B, nv, S, S, device=h.device)  # [B, nv, S_v, S_k]
            outs = []
            for t in range(T):
                kt, qt = k[:, t], q[:, t]
                M = M * decay[:, t, :, None, None]
                d = (v[:, t] - torch.einsum("bhvk,bhk->bhv", M, kt)) * beta[:, t, :, None]
                M = M + d[..., :, None] * kt[..., None, :]
                outs.append(torch.einsum("bhvk,bhk->bhv", M, qt))
            o = torch.stack(outs, 1) / math.sqrt(S)  # [B, T, nv, S]
            o = self.ssm_norm(o) * F.silu(z.float())
        return self.ssm_out(o.reshape(B, T, nv * S).type_as(h))

    def forward(self, x, ropes):
        h = self.attn_norm(x)
        m = self.attn(h, ropes) if self.full else self.deltanet(h)
        x = x + F.dropout(m, self.drop, self.training)
        h = self.post_attn_norm(x)
        f = self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))
        return x + F.dropout(f, self.drop, self.training)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        a = cfg["arch"]
        self.embd = nn.Embedding(cfg["vocab"], cfg["hidden"])
        blk = Qwen35Block if a == "qwen35" else AttnBlock
        self.blocks = nn.ModuleList(blk(cfg, l) for l in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["hidden"], cfg["eps"])
        self.output = None if cfg["tied"] else nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)
        n = max(cfg["ctx"], 2048)
        rot = cfg["rope_dims"]
        cb, sb = rope_tables(n, rot, cfg["rope_theta"])
        self.register_buffer("cos_base", cb, persistent=False)
        self.register_buffer("sin_base", sb, persistent=False)
        cs, ss = rope_tables(n, rot, cfg["rope_theta_swa"])
        self.register_buffer("cos_swa", cs, persistent=False)
        self.register_buffer("sin_swa", ss, persistent=False)
        std = cfg["init_std"]
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.endswith(".conv"):
                out_proj = name.endswith(("wo.weight", "w_down.weight", "ssm_out.weight"))
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * cfg["layers"]) if out_proj else std)

    def forward(self, idx):
        x = self.embd(idx)
        if self.cfg["arch"] == "gemma3":
            x = x * math.sqrt(self.cfg["hidden"])
        x = F.dropout(x, self.cfg["dropout"], self.training)
        ropes = {"base": (self.cos_base, self.sin_base), "swa": (self.cos_swa, self.sin_swa)}
        for b in self.blocks:
            x = b(x, ropes)
        x = self.norm(x)
        w = self.embd.weight if self.output is None else self.output.weight
        return x @ w.t()
