"""python_llama.py: a real client. A small transformers Llama (2 layers, hidden 64, 4 query heads sharing 2 KV heads,
head_dim 16; random weights from a config, nothing downloaded) with attntune's attention registered through
transformers' attention interface (attntune.hf) against the same model on `sdpa`: the logits, the loss and every
parameter's gradient after one training step's backward, in float32 and bfloat16; greedy decoding with a KV cache
(n = 1 against the cached keys); a padding mask refused rather than ignored. Exit 77 (skipped, saying why) where
torch or transformers is missing (tests/python_train.sh runs it)."""
import copy
import sys
import types

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print("SKIP: %s: the transformers client needs torch and transformers" % e)
    sys.exit(77)

import attntune
import attntune.hf

failures = 0


def check(cond, what):
    global failures
    print("%s: %s" % ("ok  " if cond else "FAIL", what))
    failures += not cond


def rel_err(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
calls = []
real = attntune.attention


def counted(*args, **kw):
    calls.append(kw.get("causal"))
    return real(*args, **kw)


attntune.attention = counted   # attntune.hf calls through the module: count that the model reaches it
name = attntune.hf.register()
torch.manual_seed(0)
config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0)
ref = LlamaForCausalLM(copy.deepcopy(config))     # a config each: the implementation is set on it
model = LlamaForCausalLM(copy.deepcopy(config))
model.load_state_dict(ref.state_dict())
ref.set_attn_implementation("sdpa")
model.set_attn_implementation(name)
check(model.config._attn_implementation == name and ref.config._attn_implementation == "sdpa",
      "implementations: %s and %s" % (model.config._attn_implementation, ref.config._attn_implementation))
ids = torch.randint(0, config.vocab_size, (2, 13))

# float32 tolerance: the reordered sums of two fp32 kernels through 2 layers; bfloat16: a few of its ulps (2^-8)
for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
    for m in (ref, model):
        m.to(dtype).train()
        m.zero_grad(set_to_none=True)
    del calls[:]
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    want = ref(input_ids=ids, labels=ids)
    want.loss.backward()
    check(calls == [True] * config.num_hidden_layers, "%s: attntune served each layer, causal (%s)" % (dtype, calls))
    e = rel_err(out.logits, want.logits)
    check(e < tol, "%s logits: rel error %.1e vs sdpa" % (dtype, e))
    e = abs(out.loss.item() - want.loss.item()) / abs(want.loss.item())
    check(e < tol, "%s loss %.6f vs sdpa's %.6f" % (dtype, out.loss.item(), want.loss.item()))
    grads = dict(ref.named_parameters())
    worst, where = 0.0, ""
    for pname, p in model.named_parameters():
        r = grads[pname]
        if p.grad is None or r.grad is None:
            worst, where = float("inf"), pname + " has no gradient"
            break
        e = rel_err(p.grad, r.grad)
        if e > worst:
            worst, where = e, pname
    check(worst < tol, "%s: %d parameters' gradients, worst rel error %.1e (%s) vs sdpa"
          % (dtype, len(grads), worst, where))

# decoding with a KV cache: a prompt, then one query row at a time against the cached keys
ref.to(torch.float32).eval()
model.to(torch.float32).eval()
with torch.no_grad():
    del calls[:]
    got = model.generate(ids[:1, :5], max_new_tokens=4, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    exp = ref.generate(ids[:1, :5], max_new_tokens=4, do_sample=False, output_logits=True,
                       return_dict_in_generate=True, pad_token_id=0)
    e = max(rel_err(a, b) for a, b in zip(got.logits, exp.logits))
    check(torch.equal(got.sequences, exp.sequences) and e < 1e-5 and len(calls) == 4 * config.num_hidden_layers,
          "greedy decoding, 4 tokens: %s vs sdpa's %s, logits rel error %.1e, %d calls"
          % (got.sequences.tolist(), exp.sequences.tolist(), e, len(calls)))

    # padding: refused with the reason, not attended over
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    try:
        model(input_ids=ids, attention_mask=mask)
        check(False, "a padding mask was not refused")
    except attntune.Error as e:
        check(e.code == attntune.EUNSUPPORTED and "mask" in str(e), "a padding mask: %s" % e)

# attention_forward's reading of masks, on its own: what sdpa computes with the same mask
q, k, v = torch.rand(1, 4, 5, 16), torch.rand(1, 2, 9, 16), torch.rand(1, 2, 9, 16)
j, i = torch.arange(9)[None, :], torch.arange(5)[:, None]
causal_mod, full_mod = types.SimpleNamespace(is_causal=True), types.SimpleNamespace(is_causal=False)
for what, mask, module in (("bottom-right causal", (j <= i + 4)[None, None], causal_mod),
                           ("a causal prefix of 7 keys (a static cache's)", (j <= i + 2)[None, None], causal_mod),
                           ("additive causal", torch.where(j <= i + 4, 0.0, float("-inf"))[None, None], causal_mod),
                           ("all visible", torch.ones(1, 1, 5, 9, dtype=torch.bool), causal_mod),
                           ("none, causal module: sdpa's top-left", None, causal_mod),
                           ("none, not causal", None, full_mod)):
    with torch.no_grad():
        o, _ = attntune.hf.attention_forward(module, q, k, v, mask, scaling=0.3)
        sm = mask if mask is not None else (j <= i)[None, None] if module.is_causal else None
        r = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                             attn_mask=sm, scale=0.3).transpose(1, 2)
    check(o.shape == (1, 5, 4, 16) and rel_err(o, r.expand_as(o)) < 1e-5,
          "attention_forward, mask %s: rel error %.1e vs sdpa" % (what, rel_err(o, r.expand_as(o))))
for what, mask in (("a padded key", (j <= i + 4) & (j != 2)), ("a window", (j <= i + 4) & (j > i + 1)),
                   ("none, causal, n > n_kv (sdpa: top-left)", None)):
    try:
        if mask is None:
            attntune.hf.attention_forward(causal_mod, k.repeat(1, 2, 1, 1), q, q, None)
        else:
            attntune.hf.attention_forward(causal_mod, q, k, v, mask[None, None])
        check(False, "attention_forward, mask with %s: not refused" % what)
    except attntune.Error as e:
        check(e.code == attntune.EUNSUPPORTED, "attention_forward, mask with %s: %s" % (what, e))

print("%d failed" % failures)
sys.exit(1 if failures else 0)
