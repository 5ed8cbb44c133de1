"""The decoder registry (layers.DECODERS): option checks, variant names,
aliases and the sampler's carried tensors, as the rest of the project uses
them."""
import os
import subprocess
import sys

import pytest

import layers

from conftest import FAST_RUN_FORWARD
from helpers import ROOT  # noqa: E402


def full(nmt, **options):
    return nmt.fill_options(options)


def test_every_variant_resolves_to_itself(nmt_module):
    for name in layers.VARIANTS:
        variant, scoring = layers.variant_of(full(nmt_module, **layers.variant_options(name)))
        assert name in (variant.name, '%s-%s' % (variant.name, scoring))
    # the five decoders of the papers' Table 1, one variant each (its first scoring)
    assert set(FAST_RUN_FORWARD) == {'baseline', 'mean', 'attentive', 'memory', 'selfattn'}


def test_authors_alias_implies_attentive_content_and_keeps_its_name(nmt_module):
    opts = full(nmt_module, decoder='gru_cond_att')
    assert opts['decoder'] == 'gru_cond_att'
    assert (opts['residual'], opts['att_scoring']) == ('attentive', 'content')
    assert layers.decoder_of(opts).name == 'gru_cond_residual'
    assert layers.variant_of(opts)[0].label == 'Self-attentive residual connections'
    # an explicit option wins over what the alias implies
    assert full(nmt_module, decoder='gru_cond_att', att_scoring='dot')['att_scoring'] == 'dot'


@pytest.mark.parametrize('options,fragment', [
    (dict(decoder='transformer'), "decoder must be one of gru_cond, "),
    (dict(decoder='gru_cond_residual', residual='max'), "takes residual 'mean' or "),
    (dict(decoder='gru_cond_memory', att_scoring='sum'),
     "the memory decoder takes att_scoring content or content_scope, not 'sum'"),
    (dict(decoder='gru_cond_selfattn', att_scoring='dot'), "att_scoring content or"),
])
def test_bad_decoder_options_are_input_errors(nmt_module, options, fragment):
    from machinery.text_io import InputError
    with pytest.raises(InputError) as e:
        nmt_module.check_options(full(nmt_module, **options))
    assert fragment in str(e.value)


def test_scoring_is_ignored_where_a_decoder_has_none(nmt_module):
    for decoder, residual in (('gru_cond', 'attentive'), ('gru_cond_residual', 'mean')):
        opts = full(nmt_module, decoder=decoder, residual=residual, att_scoring='sum')
        nmt_module.check_options(opts)
        assert layers.variant_of(opts)[1] is None


def test_carried_tensors_follow_the_options(nmt_module):
    def carried(**options):
        opts = full(nmt_module, dim_word=3, dim=4, **options)
        return [(c.name, c.axes) for c in layers.decoder_of(opts).carried(opts)]
    assert carried(decoder='gru_cond') == []
    assert carried(decoder='gru_cond_residual', residual='mean') == [
        ('prev_embs', ('steps', 'hyps', 'dim_word'))]
    assert carried(decoder='gru_cond_residual', residual='attentive') == [
        ('prev_embs', ('steps', 'hyps', 'dim_word')),
        ('prev_keys', ('steps', 'hyps', 'dim_word'))]
    # the authors' alias decodes with their inference
    # (docs/equations.md#the-authors-inference)
    assert carried(decoder='gru_cond_att') == [
        ('memory', ('steps', 'hyps', 'dim_word')),
        ('memory_keys', ('steps', 'hyps', 'dim_word')), ('time', ())]
    assert carried(decoder='gru_cond_att', inference='training') == carried(
        decoder='gru_cond_residual', residual='attentive')
    assert carried(decoder='gru_cond_memory') == [
        ('prev_states', ('steps', 'hyps', 'dim')), ('prev_keys', ('steps', 'hyps', 'dim'))]


def test_variant_options_rejects_unknown_names():
    for bad in ('attentive-foo', 'memory-sum', 'lstm', 'mean-dot'):
        with pytest.raises(ValueError) as e:
            layers.variant_options(bad)
        assert 'choose from baseline, mean, attentive' in str(e.value)


def test_nmt_command_line_choices_come_from_the_registry():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'nmt.py'), '--model', 'm.npz',
                           '--datasets', 'a', 'b', '--dictionaries', 'c', 'd',
                           '--decoder', 'transformer'], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice: 'transformer'" in proc.stderr
    for name in layers.DECODER_NAMES:
        assert "'%s'" % name in proc.stderr


def test_nmt_does_not_import_translate():
    """What BLEU validation and translate.py share lives in beam_search.py
    and machinery/vocab.py: importing nmt pulls in neither translate nor score."""
    code = ("import sys; import nmt; "
            "print(sorted(m for m in ('translate', 'score') if m in sys.modules))")
    proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == '[]'
