"""The default model's architecture: transformers' own Qwen3_5MoeForCausalLM (Gated DeltaNet +
gated attention, 3 linear : 1 full, MoE with a sigmoid-gated shared expert, zero-centred
RMSNorms) and one MTP layer in the published `mtp.*` layout, which HF does not implement.

MTP (vLLM qwen3_5_mtp.py / qwen3_next_mtp.py, Qwen3_5MultiTokenPredictor.forward):
    x = fc(cat[pre_fc_norm_embedding(embed(token[t+1])), pre_fc_norm_hidden(h[t])])
    x = layers[0](x)            # a full-attention decoder layer with the MoE MLP, residual 0
    logits = lm_head(norm(x))   # predicts token[t+2]; embed and lm_head are the main model's
where h[t] is the main model's final hidden state after its final norm (the input of lm_head),
all norms are zero-centred (1 + w) RMSNorms, fc is [H, 2H] without bias, and the MTP layer's
position is t (the main model's position of h[t]).
"""
import math

import torch
import torch.nn as nn
import transformers
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hfm

# The default model's sizes (see README / report for the reasoning).
ARCH = dict(
    hidden_size=384,
    num_hidden_layers=8,
    layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 +
    ["full_attention"],
    num_attention_heads=6, num_key_value_heads=2, head_dim=64,
    linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_num_key_heads=4, linear_num_value_heads=8,
    num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64,
    shared_expert_intermediate_size=256,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                     "partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2],
                     "mrope_interleaved": True},
    tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=8192,
    hidden_act="silu", attention_bias=False, router_aux_loss_coef=0.001,
)
MTP_LAYERS = 1


def make_config(vocab_size, eos_token_id):
    cfg = transformers.Qwen3_5MoeTextConfig(vocab_size=vocab_size, eos_token_id=eos_token_id,
                                            bos_token_id=None, pad_token_id=None, **ARCH)
    # Published Qwen3.5 configs carry this field; HF ignores it (it drops mtp.* on load).
    # export.config_dict writes it in any case.
    try:
        cfg.mtp_num_hidden_layers = MTP_LAYERS
    except Exception as e:  # noqa: BLE001
        print(f"[model] note: config does not take mtp_num_hidden_layers ({e!r})", flush=True)
    return cfg


def mtp_layer_index(cfg):
    """A full-attention layer index: HF's decoder layer picks its block type by index."""
    return max(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")


class MtpHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = hfm.Qwen3_5MoeRMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = hfm.Qwen3_5MoeRMSNorm(h, eps=eps)
        self.layers = nn.ModuleList([hfm.Qwen3_5MoeDecoderLayer(cfg, mtp_layer_index(cfg))
                                     for _ in range(MTP_LAYERS)])
        self.norm = hfm.Qwen3_5MoeRMSNorm(h, eps=eps)

    def forward(self, next_embeds, hidden, position_embeddings, attention_mask=None):
        """next_embeds = embed(token[t+1]), hidden = h[t] (post final norm); [B, T, H] each.
        attention_mask None means causal (sdpa); pass causal_mask(...) for other backends."""
        x = torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)],
                      dim=-1)
        x = self.fc(x)
        x = self.layers[0](x, position_embeddings=position_embeddings,
                           attention_mask=attention_mask, position_ids=None,
                           past_key_values=None)
        if isinstance(x, tuple):
            x = x[0]
        return self.norm(x)


def causal_mask(t, dtype, device):
    m = torch.full((t, t), float("-inf"), dtype=dtype, device=device).triu(1)
    return m[None, None]


def text_positions(batch, t, device):
    """Position ids as Qwen3_5MoeTextModel builds them for text: [3, B, T] (T, H, W alike)."""
    return torch.arange(t, device=device).view(1, 1, -1).expand(3, batch, -1)


def forward_all(model, mtp, window, mtp_mask=None):
    """window [B, T+1] of token ids. Returns (main logits [B,T,V] for targets window[:,1:],
    mtp logits [B,T-1,V] for targets window[:,2:], main hidden [B,T,H])."""
    inp = window[:, :-1]
    b, t = inp.shape
    out = model.model(input_ids=inp, use_cache=False)
    h = out.last_hidden_state
    logits = model.lm_head(h)
    nxt = model.model.embed_tokens(window[:, 1:t])
    pe = model.model.rotary_emb(h, text_positions(b, t - 1, h.device))
    m = mtp(nxt, h[:, :t - 1], pe, mtp_mask)
    return logits, model.lm_head(m), h


# ---------------------------------------------------------------------------------------------
# initialisation (done here rather than trusting HF's post_init, so the MTP head gets it too)

OUT_PROJ_SUFFIXES = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "down_proj")


@torch.no_grad()
def init_weights(named_params, std, num_layers):
    for name, p in named_params:
        if name.endswith("A_log"):
            p.copy_(torch.empty_like(p).uniform_(1.0, 16.0).log_())
        elif name.endswith("dt_bias"):
            # Mamba2's: softplus(dt_bias) log-uniform in [1e-3, 1e-1], so that
            # exp(-A * dt) spans short and long memories at the start
            dt = torch.empty_like(p).uniform_(math.log(1e-3), math.log(1e-1)).exp_()
            p.copy_(dt + torch.log(-torch.expm1(-dt)))
        elif name.endswith("linear_attn.norm.weight"):
            p.fill_(1.0)  # the gated norm of GDN is plain w (not 1 + w)
        elif name.endswith("conv1d.weight"):
            bound = 1.0 / math.sqrt(p.shape[-1])
            p.uniform_(-bound, bound)
        elif p.ndim == 1:
            p.zero_()  # zero-centred (1 + w) RMSNorms
        elif name.endswith(OUT_PROJ_SUFFIXES):
            p.normal_(0.0, std / math.sqrt(2 * num_layers))
        else:
            p.normal_(0.0, std)


def set_implementations(model, attn=None, experts=None):
    """Switches attention / experts implementations; returns what the config now says."""
    for kind, value in (("attn", attn), ("experts", experts)):
        if value is None:
            continue
        try:
            getattr(model, f"set_{kind}_implementation")(value)
        except Exception as e1:  # noqa: BLE001 - the config attribute is read at every call
            try:
                setattr(model.config, f"_{kind}_implementation", value)
            except Exception as e2:  # noqa: BLE001
                print(f"[model] could not set the {kind} implementation to {value}: {e1!r}, "
                      f"{e2!r}", flush=True)
    return (getattr(model.config, "_attn_implementation", None),
            getattr(model.config, "_experts_implementation", None))


def count_params(module):
    seen, n = set(), 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def param_report(model, mtp):
    cfg = model.config
    emb = model.model.embed_tokens.weight.numel()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    total = count_params(model)
    per_tok_experts = experts * cfg.num_experts_per_tok // cfg.num_experts
    return {
        "main_total": total,
        "embedding": emb,
        "lm_head_tied": bool(cfg.tie_word_embeddings),
        "routed_experts": experts,
        "main_active_per_token": total - experts + per_tok_experts,
        "mtp_total": count_params(mtp),
        "total_with_mtp": total + count_params(mtp),
    }
