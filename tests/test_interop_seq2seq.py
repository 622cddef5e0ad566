"""``posenc.interop.patch`` on encoder–decoders (issue 51): BART, mBART and PLBart (learned tables,
offset 2), BlenderBot and BlenderBot Small (learned, no offset), Marian and Pegasus (fixed sinusoidal tables, sin half then cos half), each stack (the
encoder, the decoder) patched as a model of its own: the encoder's self-attention bidirectional, the
decoder's causal (each read from the module), the cross-attention left to transformers. Their own
tables (offset 2) through posenc leave the logits unchanged; another scheme has an effect; greedy
``generate`` through the cache equals recomputing from scratch at every step, with a padded encoder
row. Each model built tiny from its config class with random weights (the encoder and decoder of
different depth and head count)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _patched_llama import sharpened  # noqa: E402
from posenc.interop.state import layer_state  # noqa: E402

SIZES = dict(encoder_layers=2, decoder_layers=3, d_model=32, encoder_ffn_dim=32, decoder_ffn_dim=32,
             encoder_attention_heads=4, decoder_attention_heads=2, vocab_size=64, max_position_embeddings=64,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, dropout=0.0,
             tie_word_embeddings=False)  # untied: a tied head repeats its input token
BART = ("bart", "mbart", "plbart", "blenderbot", "blenderbot-small")  # BlenderBot's tables: no offset
SINUSOIDAL = ("marian", "pegasus")
NEW = 8  # tokens generated
GREEDY = dict(eos_token_id=None, forced_eos_token_id=None, forced_bos_token_id=None, no_repeat_ngram_size=0,
              num_beams=1, do_sample=False, max_new_tokens=NEW, min_length=0, return_dict_in_generate=True,
              output_logits=True, pad_token_id=1)


def tiny(model_type: str, **extra):
    default = transformers.AutoConfig.for_model(model_type)
    config = type(default)(**{k: v for k, v in {**SIZES, **extra}.items() if hasattr(default, k)})
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    return sharpened(model)  # peaked attention rows: positions show


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder ids (the second row padded after 12 tokens), their mask, decoder ids."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (2, 20), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 12:], mask[1, 12:] = 1, 0
    return ids, mask, torch.randint(3, 60, (2, 9), generator=g)


def _logits(model, ids, mask, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits.double()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("model_type", BART)
def test_own_tables_through_posenc_leave_the_logits_unchanged(model_type):
    """``hf_layer_specs`` gives each encoder layer, then each decoder layer, the stack's table (offset
    2); patched, the logits are equal, each stack's table is the one in use (zeroing the encoder's,
    or the decoder's, changes them), and ``unpatch`` restores the model."""
    model = tiny(model_type)
    ids, mask, dec = _batch()
    expected = _logits(model, ids, mask, dec)
    specs = hf_layer_specs(model.config)
    assert specs == [{"scheme": "learned", "d_model": 32, "max_positions": 64}] * 5
    posenc.interop.patch(model, specs)
    assert _rel(_logits(model, ids, mask, dec), expected) < 1e-6
    for stack in (model.model.encoder, model.model.decoder):
        (pe,) = stack.posenc_modules
        kept = pe.weight.detach().clone()
        with torch.no_grad():
            pe.weight.zero_()
        assert _rel(_logits(model, ids, mask, dec), expected) > 1e-3
        with torch.no_grad():
            pe.weight.copy_(kept)
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask, dec), expected)


@pytest.mark.parametrize("model_type", SINUSOIDAL)
def test_own_sinusoidal_tables_through_posenc_leave_the_logits_unchanged(model_type):
    """Marian's and Pegasus's fixed tables are posenc's ``sinusoidal`` of ``layout="half"`` (``[sin |
    cos]``, base 10000), checked row by row: logits equal; a doubled base, or the interleaved layout,
    changes them (the table in use is posenc's)."""
    model = tiny(model_type)
    ids, mask, dec = _batch()
    expected = _logits(model, ids, mask, dec)
    specs = hf_layer_specs(model.config)
    assert specs == [{"scheme": "sinusoidal", "d_model": 32, "base": 10000.0, "layout": "half"}] * 5
    posenc.interop.patch(model, specs)
    assert _rel(_logits(model, ids, mask, dec), expected) < 1e-6
    for other in ({**specs[0], "base": 20000.0}, {**specs[0], "layout": "interleaved"}):
        posenc.interop.patch(model, other)
        assert _rel(_logits(model, ids, mask, dec), expected) > 1e-3
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask, dec), expected)


def test_a_sinusoidal_table_that_is_not_posenc_s_is_refused():
    """Marian's table is compared with posenc's reading before anything is replaced: a table whose
    values differ (here, one row changed) is refused by name, and the model is left as it was."""
    model = tiny("marian")
    with torch.no_grad():
        model.model.decoder.embed_positions.weight[3, 0] += 0.01
    with pytest.raises(ValueError, match="MarianDecoder.*position table differs from posenc's"):
        posenc.interop.patch(model, hf_layer_specs(model.config))
    assert getattr(model, "_posenc_original", None) is None
    assert type(model.model.encoder.embed_positions).__name__ == "MarianSinusoidalPositionalEmbedding"
    assert model.config._attn_implementation != "posenc"


@pytest.mark.parametrize("model_type", BART + SINUSOIDAL)
def test_alibi_is_bidirectional_in_the_encoder_causal_in_the_decoder(model_type):
    """ALiBi placed: the encoder's first token sees its last (bidirectional), the decoder's first
    token does not see its last (causal), the decoder sees the encoder (cross-attention kept), and a
    padded encoder key changes nothing; each stack's heads are its own (4 and 2)."""
    model = posenc.interop.patch(tiny(model_type), "alibi")
    assert [layer_state(a) is not None for a in (model.model.encoder.layers[0].self_attn,
                                                 model.model.decoder.layers[0].self_attn)] == [True, True]
    assert layer_state(model.model.decoder.layers[0].encoder_attn) is None  # cross-attention untouched
    assert model.model.decoder.layers[0].self_attn.posenc_pe.num_heads == 2
    ids, mask, dec = _batch()
    base = _logits(model, ids, mask, dec)
    with torch.no_grad():
        encoded = model.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        later = ids.clone()
        later[0, 11] = (later[0, 11] + 1 - 3) % 57 + 3
        later[1, 15] = 7  # a padded key of row 1
        moved = model.model.encoder(input_ids=later, attention_mask=mask).last_hidden_state
    assert (moved[0, 0] - encoded[0, 0]).abs().max() > 1e-6
    assert torch.allclose(moved[1, :12], encoded[1, :12], rtol=0, atol=1e-6)
    last = dec.clone()
    last[:, -1] = (last[:, -1] + 1 - 3) % 57 + 3
    assert torch.equal(_logits(model, ids, mask, last)[:, :-1], base[:, :-1])
    assert (_logits(model, later, mask, dec)[0] - base[0]).abs().max() > 1e-6


@pytest.mark.parametrize(("model_type", "scheme"), [("bart", "alibi"), ("bart", "rope"), ("bart", "sinusoidal"),
                                                    ("bart", "own"), ("mbart", "rope"), ("plbart", "alibi"),
                                                    ("marian", "alibi"), ("marian", "own"), ("pegasus", "alibi"),
                                                    ("blenderbot-small", "alibi")])
def test_greedy_generation_through_the_cache_equals_recomputing(model_type, scheme):
    """``generate`` (greedy, transformers' cache) with a posenc scheme in both stacks and a padded
    encoder row: every step's logits equal a forward over the whole prefix without a cache."""
    model = tiny(model_type)
    ids, mask, _ = _batch()
    posenc.interop.patch(model, hf_layer_specs(model.config) if scheme == "own" else scheme)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, **GREEDY)
        dec = out.sequences[:, :1]
        for step in range(NEW):
            logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits[:, -1]
            assert _rel(out.logits[step].double(), logits.double()) < 1e-5, step
            dec = torch.cat([dec, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(dec, out.sequences)
    assert len(set(out.sequences[:, 1:].flatten().tolist())) > 1  # not one token repeated: positions show


def test_a_training_step_reaches_both_stacks():
    model = posenc.interop.patch(tiny("bart", attention_dropout=0.1), "alibi")
    ids, mask, dec = _batch()
    model.train()
    loss = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, labels=dec).loss
    loss.backward()
    for stack in (model.model.encoder, model.model.decoder):
        assert stack.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_one_config_two_models_each_runs_as_itself():
    """Two BARTs built from one config object: patching one leaves the other's config and outputs."""
    config = tiny("bart").config
    torch.manual_seed(0)
    first, second = (transformers.BartForConditionalGeneration(config).eval() for _ in range(2))
    ids, mask, dec = _batch()
    before = _logits(second, ids, mask, dec)
    posenc.interop.patch(first, "alibi")
    assert config._attn_implementation != "posenc" and not hasattr(config, "posenc")
    assert torch.equal(_logits(second, ids, mask, dec), before)
    posenc.interop.unpatch(first)


def test_layers_and_context_parallel_are_refused_on_an_encoder_decoder():
    model = tiny("bart")
    with pytest.raises(ValueError, match="encoder–decoder; layers="):
        posenc.interop.patch(model, "alibi", layers=[0])
    with pytest.raises(ValueError, match="encoder–decoder; context_parallel="):
        posenc.interop.patch(model, "alibi", context_parallel="ring")


def tiny_whisper():
    config = transformers.WhisperConfig(
        encoder_layers=2, decoder_layers=3, d_model=32, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=4, decoder_attention_heads=2, vocab_size=64, max_source_positions=16,
        max_target_positions=32, num_mel_bins=8, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=3, tie_word_embeddings=False, suppress_tokens=None, begin_suppress_tokens=None)
    torch.manual_seed(0)
    return transformers.WhisperForConditionalGeneration(config).eval()


def _whisper_logits(model, features, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(input_features=features, decoder_input_ids=dec).logits.double()


def test_whisper_own_tables_through_posenc_leave_the_logits_unchanged():
    """Whisper's encoder sinusoids are posenc's ``sinusoidal`` of ``layout="half"`` at base
    ``10000^(d/(d−2))`` (OpenAI's ``sinusoids``), its decoder's table ``learned``: logits equal; the
    encoder's base doubled, or the decoder's table zeroed, changes them."""
    model = tiny_whisper()
    features, dec = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(0)), torch.randint(4, 60, (2, 9))
    expected = _whisper_logits(model, features, dec)
    specs = hf_layer_specs(model.config)
    assert specs[:2] == [{"scheme": "sinusoidal", "d_model": 32, "base": 10000.0 ** (32 / 30), "layout": "half"}] * 2
    assert specs[2:] == [{"scheme": "learned", "d_model": 32, "max_positions": 32}] * 3
    posenc.interop.patch(model, specs)
    assert _rel(_whisper_logits(model, features, dec), expected) < 1e-5
    posenc.interop.patch(model, [{**specs[0], "base": 2 * specs[0]["base"]}] * 2 + specs[2:])
    assert _rel(_whisper_logits(model, features, dec), expected) > 1e-3
    posenc.interop.patch(model, specs)
    with torch.no_grad():
        model.model.decoder.posenc_modules[0].weight.zero_()
    assert _rel(_whisper_logits(model, features, dec), expected) > 1e-3
    posenc.interop.unpatch(model)
    assert torch.equal(_whisper_logits(model, features, dec), expected)


def test_whisper_greedy_generation_through_the_cache_equals_recomputing():
    """ALiBi in both stacks (the encoder's bidirectional): transformers' greedy loop
    (``GenerationMixin.generate``; Whisper's own ``generate`` adds its task and timestamp logic)
    through the cache equals a forward over the whole prefix at every step."""
    model = posenc.interop.patch(tiny_whisper(), "alibi")
    features = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = transformers.GenerationMixin.generate(model, input_features=features, max_new_tokens=NEW, do_sample=False,
                                                    num_beams=1, eos_token_id=None, return_dict_in_generate=True,
                                                    output_logits=True, forced_decoder_ids=None)
        dec = out.sequences[:, :1]
        for step in range(NEW):
            logits = model(input_features=features, decoder_input_ids=dec, use_cache=False).logits[:, -1]
            assert _rel(out.logits[step].double(), logits.double()) < 1e-5, step
            dec = torch.cat([dec, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(dec, out.sequences)
    assert len(set(out.sequences[:, 1:].flatten().tolist())) > 1


def test_save_and_reload_keeps_each_stack_s_own_modules(tmp_path):
    """``save_pretrained`` after ``patch`` and ``posenc.interop.from_pretrained``: the record keeps the
    encoder's and the decoder's modules apart (a learned table each, with parameters of their own), so
    the reloaded model gives the same logits."""
    model = posenc.interop.patch(tiny("bart"), "learned")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".posenc_modules." in name:
                parameter.normal_()
    ids, mask, dec = _batch()
    expected = _logits(model, ids, mask, dec)
    assert model.config.posenc["layers"] == [0, 0, 1, 1, 1]
    model.save_pretrained(tmp_path)
    again = posenc.interop.from_pretrained(tmp_path, transformers.AutoModelForSeq2SeqLM).eval()
    assert torch.equal(_logits(again, ids, mask, dec), expected)


def test_a_bart_decoder_alone_takes_the_decoder_part_of_the_own_specs():
    """``BartForCausalLM`` (a decoder stack alone): ``hf_layer_specs``'s decoder entries go to it."""
    config = transformers.BartConfig(**{**SIZES, "encoder_layers": 3})
    torch.manual_seed(0)
    model = transformers.BartForCausalLM(config).eval()
    ids = torch.randint(3, 60, (2, 10))
    with torch.no_grad():
        expected = model(ids).logits
        posenc.interop.patch(model, hf_layer_specs(model.config))
        assert torch.equal(model(ids).logits, expected)
    assert type(model.model.decoder.embed_positions).__name__ == "PositionTable"


@pytest.mark.parametrize("model_type", ["m2m_100", "fsmt", "led", "bigbird_pegasus", "pegasus_x", "mvp"])
def test_an_encoder_decoder_without_a_row_is_refused_by_hf_layer_specs(model_type):
    """An encoder–decoder posenc has no row for is refused by name, never read as a decoder's RoPE
    (``hf_layer_specs`` of M2M100's config gave a ``rope`` spec, which its sinusoidal tables are not)."""
    with pytest.raises(ValueError, match=f"model type '{model_type}' is an encoder–decoder without a row"):
        hf_layer_specs(transformers.AutoConfig.for_model(model_type))
