"""A Llama-style decoder whose KV cache lives in a session's variables, on the device.

Two graphs share the session's variables (names from `variable_names`):

    prefill  ids int64[1, seq] -> token int64[1, 1]
             writes K and V of every prompt position into the caches (AssignSlice at 0),
             pos = seq, token = the prompt's next token
    decode   (no inputs) -> token int64[1, 1]
             reads token and pos, computes one position, writes its K and V into the
             caches at pos (AssignSlice), attends over the cache with a mask past pos,
             then token = its next token (Assign), pos += 1 (AssignAdd)

The caches are fixed-size variables [1, kv_heads, max_len, head_dim] per layer (static
shapes: the positions past `pos` are masked), so the decode step moves no KV bytes in or
out: its only output is the token, and run in sink mode (`iterations=N, return_all=True`)
one call generates N tokens. Weights are the graphs' constants.

`reference_generate` is the same model in numpy, step by step with a growing KV cache (what
the tests compare with); `weights_from_hf` reads a transformers LlamaForCausalLM's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

import graphengine
from graphengine import ops

NEG = np.float32(-1e30)  # a masked score: exp() of it minus the row's max is 0


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 172
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    max_len: int = 64  # the KV cache's positions: prompt + generated tokens
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf(cls, config: Any, max_len: int) -> LlamaConfig:
        """The fields of a transformers LlamaConfig (default RoPE, no bias, untied head)."""
        theta = getattr(config, "rope_theta", None) or \
            (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        return cls(config.vocab_size, config.hidden_size, config.intermediate_size,
                   config.num_hidden_layers, config.num_attention_heads,
                   config.num_key_value_heads, max_len, float(theta), config.rms_norm_eps)


def variable_names(cfg: LlamaConfig) -> list[str]:
    return ["token", "pos"] + [f"{kv}_cache.{i}" for i in range(cfg.num_hidden_layers)
                               for kv in "kv"]


def random_weights(cfg: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded weights scaled so that activations and logits stay of order 1 (distinct
    argmaxes: greedy decoding is then a sharp test)."""
    rng = np.random.default_rng(seed)
    h, d, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)

    w = {"embed": rng.standard_normal((cfg.vocab_size, h)).astype(np.float32),
         "norm": norm(), "lm_head": mat(h, cfg.vocab_size)}
    for i in range(cfg.num_hidden_layers):
        w |= {f"{i}.attn_norm": norm(), f"{i}.q": mat(h, nh * d), f"{i}.k": mat(h, nkv * d),
              f"{i}.v": mat(h, nkv * d), f"{i}.o": mat(nh * d, h), f"{i}.mlp_norm": norm(),
              f"{i}.gate": mat(h, f), f"{i}.up": mat(h, f), f"{i}.down": mat(f, h)}
    return w


def weights_from_hf(model: Any) -> dict[str, np.ndarray]:
    """A transformers LlamaForCausalLM's weights, matrices as [in, out]."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    n = model.config.num_hidden_layers
    lm = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    w = {"embed": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"],
         "lm_head": np.ascontiguousarray(lm.T)}
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
             "down": "mlp.down_proj"}
    for i in range(n):
        p = f"model.layers.{i}."
        w[f"{i}.attn_norm"] = sd[p + "input_layernorm.weight"]
        w[f"{i}.mlp_norm"] = sd[p + "post_attention_layernorm.weight"]
        for key, name in names.items():
            w[f"{i}.{key}"] = np.ascontiguousarray(sd[p + name + ".weight"].T)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in w.items()}


def rope_tables(cfg: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [max_len, head_dim] as transformers computes them (float32)."""
    d = cfg.head_dim
    inv = (1.0 / (np.float32(cfg.rope_theta) ** (np.arange(0, d, 2, dtype=np.float32) / d)))
    freqs = np.arange(cfg.max_len, dtype=np.float32)[:, None] * inv.astype(np.float32)[None]
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float32)
    return np.cos(emb), np.sin(emb)


# ---- the graphs -------------------------------------------------------------------------
def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _rms_norm(x: Any, weight: np.ndarray, eps: float) -> Any:
    var = ops.ReduceMean(ops.Mul(x, x), _i64(-1), keepdims=1)
    return ops.Mul(ops.Mul(x, ops.Reciprocal(ops.Sqrt(ops.Add(var, np.float32(eps))))), weight)


def _heads(x: Any, n: int, d: int) -> Any:
    """[1, s, n*d] -> [1, n, s, d]."""
    return ops.Transpose(ops.Reshape(x, _i64(1, -1, n, d)), perm=[0, 2, 1, 3])


def _rope(x: Any, cos: Any, sin: Any, d: int) -> Any:
    half = d // 2
    x1 = ops.Slice(x, _i64(0), _i64(half), _i64(-1))
    x2 = ops.Slice(x, _i64(half), _i64(d), _i64(-1))
    return ops.Add(ops.Mul(x, cos), ops.Mul(ops.Concat(ops.Neg(x2), x1, axis=-1), sin))


def _attention(q: Any, k: Any, v: Any, mask: Any, cfg: LlamaConfig) -> Any:
    """softmax(q kᵀ / sqrt(d) + mask) v, heads merged back: [1, s, heads*d]. Grouped-query
    attention copies no K or V: the query heads sharing a KV head are folded into the query
    axis ([1, heads, s, d] -> [1, kv_heads, group*s, d], the mask repeated for them)."""
    d, kv, nh = cfg.head_dim, cfg.num_key_value_heads, cfg.num_attention_heads
    if nh != kv:
        q = ops.Reshape(q, _i64(1, kv, -1, d))
        if len(mask.shape) == 2:  # one row per query position: once per folded head
            mask = ops.Tile(mask, _i64(nh // kv, 1))
    scores = ops.Mul(ops.MatMul(q, ops.Transpose(k, perm=[0, 1, 3, 2])),
                     np.float32(1 / np.sqrt(d)))
    p = ops.Softmax(ops.Add(scores, mask), axis=-1)
    out = ops.MatMul(p, v)
    if nh != kv:
        out = ops.Reshape(out, _i64(1, nh, -1, d))
    return ops.Reshape(ops.Transpose(out, perm=[0, 2, 1, 3]), _i64(1, -1, nh * d))


def _layer(h: Any, i: int, w: Mapping[str, np.ndarray], cfg: LlamaConfig, cos: Any, sin: Any,
           cache: tuple[Any, Any], at: Any, attend) -> Any:
    """One decoder layer; writes its K and V into the caches at `at` (AssignSlice) and
    attends with `attend(q, k, v, k_cache_after, v_cache_after)`."""
    d, nh, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    x = _rms_norm(h, w[f"{i}.attn_norm"], cfg.rms_norm_eps)
    q = _rope(_heads(ops.MatMul(x, w[f"{i}.q"]), nh, d), cos, sin, d)
    k = _rope(_heads(ops.MatMul(x, w[f"{i}.k"]), nkv, d), cos, sin, d)
    v = _heads(ops.MatMul(x, w[f"{i}.v"]), nkv, d)
    k_all = ops.AssignSlice(cache[0], k, at, axis=2)
    v_all = ops.AssignSlice(cache[1], v, at, axis=2)
    h = ops.Add(h, ops.MatMul(attend(q, k, v, k_all, v_all), w[f"{i}.o"]))
    x = _rms_norm(h, w[f"{i}.mlp_norm"], cfg.rms_norm_eps)
    gate = ops.MatMul(x, w[f"{i}.gate"])
    act = ops.Mul(gate, ops.Sigmoid(gate))  # SiLU
    return ops.Add(h, ops.MatMul(ops.Mul(act, ops.MatMul(x, w[f"{i}.up"])), w[f"{i}.down"]))


def _state(g: graphengine.Graph, cfg: LlamaConfig) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """The session variables: token, pos and each layer's K and V caches (zero-filled)."""
    shape = (1, cfg.num_key_value_heads, cfg.max_len, cfg.head_dim)
    caches = [(g.variable(f"k_cache.{i}", shape=shape, dtype="float32"),
               g.variable(f"v_cache.{i}", shape=shape, dtype="float32"))
              for i in range(cfg.num_hidden_layers)]
    return (g.variable("token", shape=(1, 1), dtype="int64"),
            g.variable("pos", shape=(1,), dtype="int64"), caches)


def _head(g: graphengine.Graph, h: Any, w: Mapping[str, np.ndarray], cfg: LlamaConfig,
          token: Any, logits: bool) -> Any:
    """Final norm, logits of the last position, greedy next token (written to `token`)."""
    last = ops.Gather(h, _i64(-1), axis=1)  # [1, 1, hidden]
    out = ops.MatMul(_rms_norm(last, w["norm"], cfg.rms_norm_eps), w["lm_head"])
    nxt = ops.ArgMax(out, axis=-1, keepdims=0)
    if logits:
        g.output(out, name="logits")
    return ops.Assign(token, nxt)


def prefill_graph(cfg: LlamaConfig, w: Mapping[str, np.ndarray],
                  logits: bool = False) -> graphengine.Graph:
    """ids int64[1, seq] -> token: the prompt's K and V into the caches, pos = seq."""
    g = graphengine.Graph("llama_prefill")
    ids = g.input("ids", "int64", (1, "seq"))
    token, pos, caches = _state(g, cfg)
    cos_t, sin_t = rope_tables(cfg)
    seq = ops.Shape(ids, start=1, end=2)  # [seq]
    cos = ops.Unsqueeze(ops.Slice(cos_t, _i64(0), seq, _i64(0)), _i64(0, 1))
    sin = ops.Unsqueeze(ops.Slice(sin_t, _i64(0), seq, _i64(0)), _i64(0, 1))
    causal = np.triu(np.full((cfg.max_len, cfg.max_len), NEG, np.float32), 1)
    mask = ops.Slice(causal, _i64(0, 0), ops.Concat(seq, seq, axis=0), _i64(0, 1))
    h = ops.Gather(w["embed"], ids, axis=0)
    zero = g.constant(_i64(0))

    def attend(q, k, v, k_all, v_all):  # over the prompt itself (causal)
        return _attention(q, k, v, mask, cfg)

    for i in range(cfg.num_hidden_layers):
        h = _layer(h, i, w, cfg, cos, sin, caches[i], zero, attend)
    token = _head(g, h, w, cfg, token, logits)
    g.output(token, name="token")
    ops.Assign(pos, seq)
    return g


def decode_graph(cfg: LlamaConfig, w: Mapping[str, np.ndarray],
                 logits: bool = False) -> graphengine.Graph:
    """One position from the session's state: the token after `token` at `pos`."""
    g = graphengine.Graph("llama_decode")
    token, pos, caches = _state(g, cfg)
    cos_t, sin_t = rope_tables(cfg)
    d = cfg.head_dim
    cos = ops.Reshape(ops.Gather(cos_t, pos, axis=0), _i64(1, 1, 1, d))
    sin = ops.Reshape(ops.Gather(sin_t, pos, axis=0), _i64(1, 1, 1, d))
    # the cache's positions past pos hold stale or zero K/V: masked
    mask = ops.Where(ops.LessOrEqual(np.arange(cfg.max_len, dtype=np.int64), pos),
                     np.float32(0), NEG)
    h = ops.Gather(w["embed"], token, axis=0)  # [1, 1, hidden]

    def attend(q, k, v, k_all, v_all):  # over the whole cache, this position written
        return _attention(q, k_all, v_all, mask, cfg)

    for i in range(cfg.num_hidden_layers):
        h = _layer(h, i, w, cfg, cos, sin, caches[i], pos, attend)
    token = _head(g, h, w, cfg, token, logits)
    g.output(token, name="token")
    ops.AssignAdd(pos, _i64(1))
    return g


# ---- the reference ----------------------------------------------------------------------
def _np_rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x * (1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))) * weight


def _np_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def reference_forward(cfg: LlamaConfig, w: Mapping[str, np.ndarray], ids: np.ndarray,
                      past: list[tuple[np.ndarray, np.ndarray]] | None
                      ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Logits [1, s, vocab] of `ids` [1, s] after `past` (per layer K and V [1, kv, t, d]),
    and the grown past: the usual past-key-value decoder, in float32 numpy."""
    d, nh, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    t0 = 0 if not past else past[0][0].shape[2]
    s = ids.shape[1]
    cos_t, sin_t = rope_tables(cfg)
    cos, sin = cos_t[t0:t0 + s][None, None], sin_t[t0:t0 + s][None, None]
    h = w["embed"][ids]
    mask = np.where(np.arange(t0 + s)[None] > (t0 + np.arange(s))[:, None], NEG,
                    np.float32(0)).astype(np.float32)
    grown = []
    for i in range(cfg.num_hidden_layers):
        x = _np_rms(h, w[f"{i}.attn_norm"], cfg.rms_norm_eps)

        def heads(m: np.ndarray, n: int) -> np.ndarray:
            return m.reshape(1, s, n, d).transpose(0, 2, 1, 3)

        q = _np_rope(heads(x @ w[f"{i}.q"], nh), cos, sin)
        k = _np_rope(heads(x @ w[f"{i}.k"], nkv), cos, sin)
        v = heads(x @ w[f"{i}.v"], nkv)
        if past:
            k = np.concatenate([past[i][0], k], axis=2)
            v = np.concatenate([past[i][1], v], axis=2)
        grown.append((k, v))
        g = nh // nkv
        kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        scores = (q @ kr.transpose(0, 1, 3, 2)) * np.float32(1 / np.sqrt(d)) + mask
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        h = h + (p @ vr).transpose(0, 2, 1, 3).reshape(1, s, nh * d) @ w[f"{i}.o"]
        x = _np_rms(h, w[f"{i}.mlp_norm"], cfg.rms_norm_eps)
        gate = x @ w[f"{i}.gate"]
        h = h + ((gate / (1 + np.exp(-gate))) * (x @ w[f"{i}.up"])) @ w[f"{i}.down"]
    logits = _np_rms(h, w["norm"], cfg.rms_norm_eps) @ w["lm_head"]
    return logits.astype(np.float32), grown


def reference_generate(cfg: LlamaConfig, w: Mapping[str, np.ndarray], prompt: np.ndarray,
                       n: int) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens after `prompt` (int64 [s]), one step at a time, and each step's
    logits of the position that chose the token."""
    logits, past = reference_forward(cfg, w, prompt[None].astype(np.int64), None)
    tokens, seen = [], []
    for _ in range(n):
        seen.append(logits[0, -1])
        tokens.append(int(np.argmax(logits[0, -1])))
        logits, past = reference_forward(cfg, w, np.array([[tokens[-1]]], np.int64), past)
    return tokens, seen


# ---- generation through a session (in process or remote) --------------------------------
class SessionDecoder:
    """Prefill and decode graphs added to `session` (a graphengine.Session or a
    RemoteSession): generate() runs the prompt, then the decode graph in sink mode,
    `per_call` tokens per call; the KV cache never leaves the device."""

    def __init__(self, session: Any, cfg: LlamaConfig, w: Mapping[str, np.ndarray],
                 logits: bool = False) -> None:
        self.session, self.cfg = session, cfg
        self.prefill = session.add_graph(prefill_graph(cfg, w, logits))
        self.decode = session.add_graph(decode_graph(cfg, w, logits))

    def start(self, prompt: np.ndarray) -> int:
        """Runs the prompt: its K and V into the caches; returns the first new token."""
        if not 0 < len(prompt) < self.cfg.max_len:
            raise ValueError(f"a prompt of {len(prompt)} tokens does not fit the cache's "
                             f"{self.cfg.max_len} positions")
        out = self.session.run_graph(self.prefill, {"ids": np.asarray(prompt, np.int64)[None]})
        return int(out["token"].reshape(-1)[0])

    def step(self, count: int) -> list[int]:
        """`count` more tokens in one call (sink mode)."""
        out = self.session.run_graph(self.decode, {}, ["token"], iterations=count,
                                     return_all=True)
        return [int(t) for t in out["token"].reshape(-1)]

    def generate(self, prompt: np.ndarray, n: int, per_call: int = 16) -> list[int]:
        if len(prompt) + n > self.cfg.max_len:
            raise ValueError(f"{len(prompt)} + {n} tokens do not fit the cache's "
                             f"{self.cfg.max_len} positions")
        tokens = [self.start(prompt)]
        while len(tokens) < n:
            tokens += self.step(min(per_call, n - len(tokens)))
        return tokens
