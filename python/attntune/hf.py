"""attntune.hf: attntune's attention as a Hugging Face transformers attention implementation.

    import attntune.hf
    attntune.hf.register()                                   # the name "attntune", once per process
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="attntune")
    model.set_attn_implementation("attntune")                # or on a model already made

register() adds attention_forward to transformers' AttentionInterface (ALL_ATTENTION_FUNCTIONS) and, where
transformers has one (masking_utils.AttentionMaskInterface), sdpa's mask builder under the same name, so that the
model builds no mask where sdpa needs none (no padding: a causal or full mask is then a flag here). It runs through
attntune.attention, so it is differentiable (training) and reads the tuned kernel from the database like the rest of
the package. What it does not do raises attntune.Error with EUNSUPPORTED rather than computing something else: a
mask that is neither all visible nor a causal prefix of the keys (padding, packed sequences, sliding windows),
dropout > 0, softcap, position biases, output_attentions. A mask with no key hidden past a prefix is read as causal
attention over that prefix (a KV cache's), bottom-right aligned as libattn's causal is.
"""
import attntune

__all__ = ["register", "attention_forward", "NAME"]

NAME = "attntune"


def _unsupported(what):
    return attntune.Error(attntune.EUNSUPPORTED, "attntune.hf: %s: attntune's attention takes causal or full "
                          "attention without dropout; use sdpa or eager for this model" % what)


def _mask_keys(mask, n, n_kv):
    """What a 4-D mask ([batch or 1][heads or 1][n][n_kv], boolean with True visible, or additive with 0 visible)
    asks of attntune.attention: (keys, causal) where row i sees keys j <= i + keys - n of the first `keys` (a causal
    prefix, as a KV cache's mask is: bottom-right aligned on those keys), (n_kv, False) where it hides nothing, else
    None (padding, packed sequences, windows)."""
    import torch
    if mask.dim() != 4 or tuple(mask.shape[-2:]) != (n, n_kv):
        return None
    visible = mask if mask.dtype == torch.bool else mask == 0
    if bool(visible.all()):
        return n_kv, False
    first = visible[:1, :1]
    if not bool((visible == first).all()):
        return None
    keys = int(first[0, 0, -1].sum())   # the last row sees the most
    arange = torch.arange(n_kv, device=mask.device)
    seen = arange[None, :] <= arange[:n, None] + keys - n
    if keys < n or not bool((first[0, 0] == seen).all()):
        return None
    return keys, True


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query [batch][heads][n][d], key [batch][heads_kv][n_kv][d] and value
    [batch][heads_kv][n_kv][d_v] (heads_kv dividing heads: no repeat_kv needed), attention_mask None or a 4-D mask;
    returns (output [batch][n][heads][d_v], None) as sdpa's does."""
    if dropout:
        raise _unsupported("dropout=%g" % dropout)
    for name in ("softcap", "sliding_window", "position_bias", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise _unsupported(name)
    if kwargs.get("output_attentions"):
        raise _unsupported("output_attentions")
    n, n_kv = query.shape[-2], key.shape[-2]
    if attention_mask is None:
        is_causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
        # sdpa's reading of no mask: causal from the first key (a prefill into an empty static cache, whose later
        # slots are empty), which is bottom-right aligned on the first n keys
        keys = n if causal and 1 < n < n_kv else n_kv
        if causal and n > n_kv:
            raise _unsupported("causal with more queries (%d) than keys (%d) and no mask: sdpa aligns that top-left"
                               % (n, n_kv))
    else:
        what = _mask_keys(attention_mask, n, n_kv)
        if what is None:
            raise _unsupported("an attention mask of shape %s that is neither all visible nor a causal prefix "
                               "(padding?)" % (tuple(attention_mask.shape),))
        keys, causal = what
    if keys < n_kv:
        key, value = key[:, :, :keys], value[:, :, :keys]
    o = attntune.attention(query, key, value, causal=causal, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def register(name=NAME):
    """Registers attention_forward as transformers' attention implementation `name` (and sdpa's mask builder under
    it where transformers has AttentionMaskInterface); returns name."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:   # older transformers build the eager (additive) mask, which attention_forward reads
        pass
    else:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name
