#!/usr/bin/env python3
"""Trains kvtier's bundled Llama-architecture model and exports it as GGUF.

Architecture (GGUF arch "llama"): token embedding (tied with the output head), N blocks of
  x += attn(RMSNorm(x)); x += ffn(RMSNorm(x)), final RMSNorm, logits = norm(x) @ embd^T.
  Attention: 4 query heads, 2 KV heads (GQA: query head h reads KV head h // 2), head_dim
  128, RoPE theta 10000 applied to adjacent pairs (2i, 2i+1) -- llama.cpp's NORMAL rope mode
  for arch "llama", so the q/k weights are exported as trained, with no permutation.
  FFN: SwiGLU, down(silu(gate(x)) * up(x)). RMSNorm eps 1e-5. No biases.

Training: random windows of --seq tokens from the Austen and Brown token streams
(data/train/*.bin from prepare.py; a row is Austen with probability --p-austen), AdamW, bf16
autocast, linear warm-up then cosine decay over max(time fraction, token fraction), residual
dropout. The run stops at the wall-clock deadline (--minutes) or after --epochs passes over
the training tokens, whichever comes first. The checkpoint kept is the one with the lowest
loss on the in-domain validation split (val.bin); the held-out novel (eval.bin) is only
reported.

Outputs under --out: the GGUF (f16 weights, f32 norms), optionally split into parts of at
most --split-mb MiB (the device returns files of at most 16 MiB), and train_log.json.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import gguf_writer as gw  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rope_tables(seq, head_dim, theta, device):
    inv = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    ang = torch.arange(seq, device=device, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()  # (T, D/2)


def apply_rope(x, cos, sin):
    """x: (B, H, T, D); rotates adjacent pairs (x[2i], x[2i+1]) (llama.cpp NORMAL mode)."""
    xf = x.float()
    x0 = xf[..., 0::2]
    x1 = xf[..., 1::2]
    c = cos[: x.shape[2]]
    s = sin[: x.shape[2]]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    return out.type_as(x)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, hd = cfg["hidden"], cfg["head_dim"]
        self.nh, self.nkv, self.hd = cfg["n_head"], cfg["n_kv"], hd
        self.attn_norm = RMSNorm(d, cfg["eps"])
        self.wq = nn.Linear(d, self.nh * hd, bias=False)
        self.wk = nn.Linear(d, self.nkv * hd, bias=False)
        self.wv = nn.Linear(d, self.nkv * hd, bias=False)
        self.wo = nn.Linear(self.nh * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, cfg["eps"])
        self.w_gate = nn.Linear(d, cfg["ffn"], bias=False)
        self.w_up = nn.Linear(d, cfg["ffn"], bias=False)
        self.w_down = nn.Linear(cfg["ffn"], d, bias=False)
        self.drop = cfg["dropout"]

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a = a.transpose(1, 2).reshape(B, T, self.nh * self.hd)
        x = x + F.dropout(self.wo(a), self.drop, self.training)
        h = self.ffn_norm(x)
        f = self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))
        return x + F.dropout(f, self.drop, self.training)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embd = nn.Embedding(cfg["vocab"], cfg["hidden"])
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["hidden"], cfg["eps"])
        cos, sin = rope_tables(cfg["ctx"], cfg["head_dim"], cfg["rope_theta"], "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * cfg["layers"]) if n.endswith(("wo.weight", "w_down.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, idx):
        x = F.dropout(self.embd(idx), self.cfg["dropout"], self.training)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        x = self.norm(x)
        return x @ self.embd.weight.t()  # tied output head


def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


@torch.no_grad()
def window_loss(model, ids, seq, second_half_only=False, batch=16):
    """Mean NLL over non-overlapping windows of seq tokens (the tail shorter than a window is
    dropped). second_half_only scores only the last seq//2 targets of each window, as
    llama-perplexity does."""
    model.eval()
    n = (len(ids) - 1) // seq
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        rows = [ids[j * seq:(j + 1) * seq + 1] for j in range(i, min(n, i + batch))]
        x = torch.stack([r[:-1] for r in rows]).cuda()
        y = torch.stack([r[1:] for r in rows]).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
        if second_half_only:
            nll = nll[:, seq // 2:]
        tot += nll.sum().item()
        cnt += nll.numel()
    model.train()
    return tot / max(cnt, 1)


@torch.no_grad()
def sample(model, tok, prompt, n, temperature=0.8, top_k=40, seed=1):
    model.eval()
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.tensor([tok.encode(prompt)], device="cuda")
    for _ in range(n):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids[:, -model.cfg["ctx"]:])[:, -1].float()
        logits = logits / temperature
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[:, -1:]] = -float("inf")
        nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=g)
        ids = torch.cat([ids, nxt], 1)
    model.train()
    return tok.decode(ids[0].tolist())


def export_gguf(model, tok, cfg, path, name, add_bos):
    w = gw.GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", name)
    w.add_u32("general.file_type", gw.FTYPE_MOSTLY_F16)
    w.add_u32("general.quantization_version", 2)
    w.add_u32("llama.context_length", cfg["ctx"])
    w.add_u32("llama.embedding_length", cfg["hidden"])
    w.add_u32("llama.block_count", cfg["layers"])
    w.add_u32("llama.feed_forward_length", cfg["ffn"])
    w.add_u32("llama.attention.head_count", cfg["n_head"])
    w.add_u32("llama.attention.head_count_kv", cfg["n_kv"])
    w.add_u32("llama.attention.key_length", cfg["head_dim"])
    w.add_u32("llama.attention.value_length", cfg["head_dim"])
    w.add_f32("llama.rope.freq_base", float(cfg["rope_theta"]))
    w.add_u32("llama.rope.dimension_count", cfg["head_dim"])
    w.add_f32("llama.attention.layer_norm_rms_epsilon", float(cfg["eps"]))
    w.add_u32("llama.vocab_size", cfg["vocab"])
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-2")
    w.add_array("tokenizer.ggml.tokens", gw.T_STRING, tok.tokens)
    w.add_array("tokenizer.ggml.token_type", gw.T_INT32,
                [3 if t == bpe.EOT else 1 for t in tok.tokens])  # 1 normal, 3 control
    w.add_array("tokenizer.ggml.merges", gw.T_STRING, [a + " " + b for a, b in tok.merges])
    w.add_u32("tokenizer.ggml.bos_token_id", tok.eot_id)
    w.add_u32("tokenizer.ggml.eos_token_id", tok.eot_id)
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", False)

    def f16(t):
        return t.detach().float().cpu().numpy().astype(np.float16).tobytes()

    def f32(t):
        return t.detach().float().cpu().numpy().astype(np.float32).tobytes()

    def add(name, t, norm=False):
        w.add_tensor(name, list(t.shape), gw.GGML_F32 if norm else gw.GGML_F16,
                     f32(t) if norm else f16(t))

    add("token_embd.weight", model.embd.weight)  # (vocab, hidden) -> ne [hidden, vocab]
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        add(p + "attn_norm.weight", b.attn_norm.weight, norm=True)
        add(p + "attn_q.weight", b.wq.weight)
        add(p + "attn_k.weight", b.wk.weight)
        add(p + "attn_v.weight", b.wv.weight)
        add(p + "attn_output.weight", b.wo.weight)
        add(p + "ffn_norm.weight", b.ffn_norm.weight, norm=True)
        add(p + "ffn_gate.weight", b.w_gate.weight)
        add(p + "ffn_up.weight", b.w_up.weight)
        add(p + "ffn_down.weight", b.w_down.weight)
    add("output_norm.weight", model.norm.weight, norm=True)
    return w.write(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/train")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--name", default="kvtier-austen-30m")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock training budget")
    ap.add_argument("--epochs", type=float, default=10.0, help="cap on passes over the training tokens")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--p-austen", type=float, default=0.35)
    ap.add_argument("--eval-every", type=float, default=30.0, help="seconds between evaluations")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--add-bos", type=int, default=0)
    ap.add_argument("--split-mb", type=int, default=15)
    ap.add_argument("--tag", default="", help="prefix for output files")
    ap.add_argument("--no-export", action="store_true")
    a = ap.parse_args()

    t_start = time.time()
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    tok = bpe.Tokenizer.load(os.path.join(a.data, "tokenizer.json"))
    cfg = dict(vocab=len(tok.tokens), hidden=a.hidden, layers=a.layers, n_head=4, n_kv=2,
               head_dim=128, ffn=a.ffn, eps=1e-5, rope_theta=10000.0, ctx=a.seq,
               dropout=a.dropout)
    austen = load_ids(os.path.join(a.data, "austen.bin")).cuda()
    brown = load_ids(os.path.join(a.data, "brown.bin")).cuda()
    val = load_ids(os.path.join(a.data, "val.bin"))
    evl = load_ids(os.path.join(a.data, "eval.bin"))
    n_train = len(austen) + len(brown)
    print("torch %s, %s; train tokens %d (austen %d, brown %d), val %d, eval %d"
          % (torch.__version__, torch.cuda.get_device_name(), n_train, len(austen), len(brown),
             len(val), len(evl)), flush=True)

    model = Model(cfg).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    print("params %d (%.2f M), cfg %s" % (n_params, n_params / 1e6, json.dumps(cfg)), flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    B, T = a.batch, a.seq
    budget_s = a.minutes * 60
    max_tokens = a.epochs * n_train
    offs = torch.arange(T + 1, device="cuda")

    def get_batch():
        pick = torch.rand(B, device="cuda") < a.p_austen
        sa = torch.randint(0, len(austen) - T - 1, (B,), device="cuda")
        sb = torch.randint(0, len(brown) - T - 1, (B,), device="cuda")
        xa = austen[sa[:, None] + offs]
        xb = brown[sb[:, None] + offs]
        x = torch.where(pick[:, None], xa, xb)
        return x[:, :-1], x[:, 1:]

    log = {"cfg": cfg, "args": vars(a), "params": n_params, "evals": []}
    best = (float("inf"), None, 0)
    step, tokens = 0, 0
    t0 = time.time()
    next_eval = t0 + a.eval_every
    loss_ema = None
    while True:
        elapsed = time.time() - t0
        progress = max(elapsed / budget_s, tokens / max_tokens)
        if progress >= 1.0:
            break
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += B * T
        if step % 20 == 0:
            lv = loss.item()
            loss_ema = lv if loss_ema is None else 0.9 * loss_ema + 0.1 * lv
        if time.time() >= next_eval or step == 5:
            vl = window_loss(model, val, T)
            el = window_loss(model, evl, T)
            now = time.time() - t0
            e = dict(step=step, tokens=tokens, epochs=tokens / n_train, s=round(now, 1),
                     lr=lr, train=loss_ema, val=vl, eval=el)
            log["evals"].append(e)
            print("step %6d  tok %6.1fM  ep %5.2f  %5.0fs  lr %.2e  train %.4f  val %.4f  eval(%s) %.4f  %.0f tok/s"
                  % (step, tokens / 1e6, tokens / n_train, now, lr, loss_ema or float("nan"), vl,
                     "persuasion", el, tokens / max(now, 1e-9)), flush=True)
            if vl < best[0]:
                best = (vl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
            next_eval = time.time() + a.eval_every

    train_s = time.time() - t0
    vl = window_loss(model, val, T)
    if vl < best[0]:
        best = (vl, None, step)
    elif best[1] is not None:
        model.load_state_dict(best[1])
        print("restored checkpoint of step %d (val %.4f < final %.4f)" % (best[2], best[0], vl))
    res = dict(steps=step, tokens=tokens, epochs=tokens / n_train, train_seconds=round(train_s, 1),
               chosen_step=best[2], train_loss_ema=loss_ema,
               train_loss_full=None,
               val_loss=window_loss(model, val, T),
               eval_loss_seq=window_loss(model, evl, T),
               eval_loss_512=window_loss(model, evl, 512),
               eval_ppl_llamacpp_style_512=math.exp(window_loss(model, evl, 512, True)),
               eval_ppl_llamacpp_style_2048=math.exp(window_loss(model, evl, 2048, True)))
    # train loss without dropout on a fixed sample of the training streams
    tr_sample = torch.cat([austen[:400000].cpu(), brown[:400000].cpu()])
    res["train_loss_full"] = window_loss(model, tr_sample, T)
    res["eval_ppl_seq"] = math.exp(res["eval_loss_seq"])
    log["result"] = res
    print(json.dumps(res, indent=1), flush=True)
    prompts = ["It is a truth universally acknowledged, that", "Chapter 1\n\n\n",
               "\"My dear Elizabeth,\" said her father,"]
    log["samples"] = [sample(model, tok, p, 200, seed=i + 1) for i, p in enumerate(prompts)]
    for s in log["samples"]:
        print("---\n" + s, flush=True)

    path = os.path.join(a.out, a.tag + a.name + ".gguf")
    size = 0 if a.no_export else export_gguf(model, tok, cfg, path, a.name, bool(a.add_bos))
    if size:
        print("wrote %s (%d bytes)" % (path, size), flush=True)
    if a.split_mb and size > a.split_mb << 20:
        with open(path, "rb") as f:
            k = 0
            while True:
                chunk = f.read(a.split_mb << 20)
                if not chunk:
                    break
                with open("%s.part%d" % (path, k), "wb") as g2:
                    g2.write(chunk)
                k += 1
        os.remove(path)
        print("split into %d parts" % k, flush=True)
    log["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, a.tag + "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
