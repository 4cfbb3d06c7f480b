"""python_hf_mods.py: attntune.hf with the score modifiers transformers' models pass: a small Mistral (sliding window
of 5 over 13 tokens) against the same model on `sdpa`, and a small Gemma 2 (soft-capped scores, a sliding and a
global layer) against `eager` (sdpa has no soft-capping), both from configs with random weights (nothing
downloaded): the logits, that attntune served every layer with the layer's window and softcap, and greedy decoding
with a KV cache (n = 1 against the cached keys, the window cutting them). Training with them: the gradients against
the reference's where libattn's backward takes the modifiers, else the clear EUNSUPPORTED. Exit 77 (skipped, saying
why) where torch or transformers (or either model) is missing (tests/python_train.sh runs it)."""
import copy
import sys

try:
    import torch
    import transformers
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
    calls.append((kw.get("causal"), kw.get("window"), kw.get("softcap")))
    return real(*args, **kw)


attntune.attention = counted   # attntune.hf calls through the module: what each layer asked for
name = attntune.hf.register()
common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=64, attention_dropout=0.0)
models = []
try:
    from transformers import MistralConfig, MistralForCausalLM
    models.append(("mistral", MistralForCausalLM, MistralConfig(sliding_window=5, **common), "sdpa",
                   [(True, 5, 0.0)] * 2))
except ImportError as e:
    print("skip: Mistral: %s" % e)
try:
    from transformers import Gemma2Config, Gemma2ForCausalLM
    # a small softcap that bites these scores; one sliding layer (window 4) and one global
    models.append(("gemma2", Gemma2ForCausalLM,
                   Gemma2Config(sliding_window=4, attn_logit_softcapping=2.0, query_pre_attn_scalar=16,
                                layer_types=["sliding_attention", "full_attention"], **common), "eager",
                   [(True, 4, 2.0), (True, 0, 2.0)]))
except ImportError as e:
    print("skip: Gemma 2: %s" % e)
if not models:
    print("SKIP: this transformers has neither Mistral nor Gemma 2")
    sys.exit(77)

torch.manual_seed(0)
ids = torch.randint(1, 96, (2, 13))   # no token 0: generate() reads pad_token_id 0 as padding
for what, cls, config, ref_impl, want in models:
    ref = cls(copy.deepcopy(config)).eval()
    model = cls(copy.deepcopy(config)).eval()
    model.load_state_dict(ref.state_dict())
    ref.set_attn_implementation(ref_impl)
    model.set_attn_implementation(name)
    with torch.no_grad():
        del calls[:]
        out = model(input_ids=ids).logits
        check(calls == want, "%s: every layer through attntune with its (causal, window, softcap): %s"
              % (what, calls))
        e = rel_err(out, ref(input_ids=ids).logits)
        check(e < 1e-5, "%s float32 logits: rel error %.1e vs %s" % (what, e, ref_impl))
        # the window must change the result: the same model without it differs (so the check above can fail)
        plain_config = copy.deepcopy(config)
        if what == "mistral":
            plain_config.sliding_window = None
        else:
            plain_config.layer_types = ["full_attention"] * config.num_hidden_layers
        plain = cls(plain_config).eval()
        plain.load_state_dict(ref.state_dict())
        plain.set_attn_implementation(ref_impl)
        check(rel_err(plain(input_ids=ids).logits, out) > 1e-3, "%s: the sliding window changes the logits" % what)
        # greedy decoding with a KV cache: n = 1 queries against the cached keys, past the window
        del calls[:]
        got = model.generate(ids[:1, :8], max_new_tokens=4, do_sample=False, pad_token_id=0)
        exp = ref.generate(ids[:1, :8], max_new_tokens=4, do_sample=False, pad_token_id=0)
        check(torch.equal(got, exp), "%s greedy decoding with a KV cache: %s" % (what, got[0, 8:].tolist()))
        check(len(calls) >= 2 * 4, "%s: decoding ran through attntune (%d calls)" % (what, len(calls)))

    # training with the modifiers: libattn's backward where it takes them, else a clear refusal
    model.train()
    ref.train()
    try:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    except attntune.Error as e:
        check(e.code == attntune.EUNSUPPORTED and "require grad" in str(e),
              "%s training: a clear refusal where the backward lacks the modifiers: %s" % (what, e))
    else:
        ref(input_ids=ids, labels=ids).loss.backward()
        grads = dict(ref.named_parameters())
        worst = max(rel_err(p.grad, grads[n].grad) for n, p in model.named_parameters() if grads[n].grad is not None
                    and grads[n].grad.norm() > 0)
        check(worst < 1e-4, "%s training: every gradient within %.1e of %s's" % (what, worst, ref_impl))

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
