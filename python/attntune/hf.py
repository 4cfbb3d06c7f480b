"""attntune.hf: attntune's attention as a Hugging Face transformers attention implementation.

    import attntune.hf
    attntune.hf.register()                                   # the name "attntune", once per process
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="attntune")
    model.set_attn_implementation("attntune")                # or on a model already made

register() adds attention_forward to transformers' AttentionInterface (ALL_ATTENTION_FUNCTIONS) and, where
transformers has one (masking_utils.AttentionMaskInterface), sdpa's mask builder under the same name, so that the
model builds no mask where sdpa needs none (no padding: a causal or full mask is then a flag here). It runs through
attntune.attention, so it is differentiable (training) and reads the tuned kernel from the database like the rest of
the package. A model's sliding window (Mistral's, Gemma 2's local layers: `sliding_window`, key j seen by query i iff
i - w < j <= i) and soft-capping (Gemma 2's attn_logit_softcapping: `softcap`, c*tanh(s/c)) go to attntune.attention
as window= and softcap=, libattn's own definitions of the same. What it does not do raises attntune.Error with
EUNSUPPORTED rather than computing something else: a mask that is neither all visible nor a causal prefix of the keys
(with the layer's sliding window, when it has one: padding, packed sequences), dropout > 0, position biases,
attention sinks, output_attentions. A mask with no key hidden past a prefix is read as causal attention over that
prefix (a KV cache's), bottom-right aligned as libattn's causal is.
"""
import numbers

import attntune

__all__ = ["register", "attention_forward", "NAME"]

NAME = "attntune"


def _unsupported(what):
    return attntune.Error(attntune.EUNSUPPORTED, "attntune.hf: %s: attntune's attention takes causal or full "
                          "attention without dropout; use sdpa or eager for this model" % what)


def _mask_keys(mask, n, n_kv, window=0):
    """What a 4-D mask ([batch or 1][heads or 1][n][n_kv], boolean with True visible, or additive with 0 visible)
    asks of attntune.attention: (keys, causal, windowed) where row i sees keys j <= i + keys - n of the first `keys`
    (a causal prefix, as a KV cache's mask is: bottom-right aligned on those keys), and with windowed only those
    j > i + keys - n - window (the layer's sliding window); (n_kv, False, False) where it hides nothing, else None
    (padding, packed sequences, another pattern)."""
    import torch
    if mask.dim() != 4 or tuple(mask.shape[-2:]) != (n, n_kv):
        return None
    visible = mask if mask.dtype == torch.bool else mask == 0
    if bool(visible.all()):
        return n_kv, False, False
    first = visible[:1, :1]
    if not bool((visible == first).all()):
        return None
    last = torch.nonzero(first[0, 0, -1])   # the last row sees up to the last key of the prefix
    if last.numel() == 0:
        return None
    keys = int(last[-1]) + 1
    arange = torch.arange(n_kv, device=mask.device)
    ip = arange[:n, None] + keys - n
    seen = arange[None, :] <= ip
    if keys < n:
        return None
    if bool((first[0, 0] == seen).all()):
        return keys, True, False
    if window and bool((first[0, 0] == (seen & (arange[None, :] > ip - window))).all()):
        return keys, True, True
    return None


def _positive(kwargs, name, kind):
    """kwargs[name] as a kind (int or float) > 0, or 0 when it is None or 0 (off)."""
    x = kwargs.get(name)
    if x is None or x == 0:
        return kind(0)
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not x > 0 or (kind is int and x != int(x)):
        raise _unsupported("%s=%r (expected %s > 0)" % (name, x, "an int" if kind is int else "a number"))
    return kind(x)


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query [batch][heads][n][d], key [batch][heads_kv][n_kv][d] and value
    [batch][heads_kv][n_kv][d_v] (heads_kv dividing heads: no repeat_kv needed), attention_mask None or a 4-D mask;
    returns (output [batch][n][heads][d_v], None) as sdpa's does."""
    if dropout:
        raise _unsupported("dropout=%g" % dropout)
    for name in ("position_bias", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise _unsupported(name)
    window, softcap = _positive(kwargs, "sliding_window", int), _positive(kwargs, "softcap", float)
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
        windowed = causal   # no mask built: the window hides nothing the causal mask does not, or nothing at all
    else:
        what = _mask_keys(attention_mask, n, n_kv, window)
        if what is None:
            raise _unsupported("an attention mask of shape %s that is neither all visible nor a causal prefix%s "
                               "(padding?)" % (tuple(attention_mask.shape),
                                               " with a sliding window of %d" % window if window else ""))
        keys, causal, windowed = what
    if keys < n_kv:
        key, value = key[:, :, :keys], value[:, :, :keys]
    o = attntune.attention(query, key, value, causal=causal, scale=scaling, window=window if windowed else 0,
                           softcap=softcap)
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
