"""evaluation/length_buckets.py: BLEU by source length, per system."""
import json
import os

from evaluation import length_buckets

from helpers import run_command
REFS = ['the cat sat on the mat today', 'a dog ran in the park again',
        'two men play football on green grass near a red house',
        'a woman in a blue dress sings on a stage at night']
SOURCES = ['w ' * 3, 'w ' * 4, 'w ' * 12, 'w ' * 30]
BASE = ['the cat sat on the mat today', 'a dog ran in the park again',
        'a man runs', 'someone sings']
GOOD_LONG = ['the cat', 'a dog', REFS[2], REFS[3]]


def test_bucket_names_and_membership():
    assert length_buckets.bucket_names((10, 15)) == ['1-10', '11-15', '16+']
    assert [length_buckets.bucket_of(n, (10, 15)) for n in (1, 10, 11, 15, 16, 90)] == \
        [0, 0, 1, 1, 2, 2]


def test_each_bucket_scored_on_its_own_sentences():
    rows = length_buckets.bleu_by_length([BASE, GOOD_LONG], REFS,
                                         [len(s.split()) for s in SOURCES], (10, 20))
    assert [r['bucket'] for r in rows] == ['1-10', '11-20', '21+']
    assert [r['sentences'] for r in rows] == [2, 1, 1]
    assert rows[0]['bleu'][0] == 100.0 and rows[0]['bleu'][1] < 10
    assert rows[1]['bleu'] [1] == 100.0 and rows[2]['bleu'][1] == 100.0
    assert rows[1]['bleu'][0] < 10
    table = length_buckets.format_rows(rows, ['base', 'good'])
    assert table[2].startswith('| 1-10 | 2 | 100.00 |') and table[2].endswith(' |')


def _run(tmp_path, *args):
    files = {}
    for name, lines in (('ref', REFS), ('src', SOURCES), ('a', BASE), ('b', GOOD_LONG)):
        files[name] = str(tmp_path / name)
        with open(files[name], 'w') as f:
            f.write('\n'.join(lines) + '\n')
    return run_command('evaluation/length_buckets.py',
                       ['--ref', files['ref'], '--source', files['src']] + list(args)
                       + [files['a'], files['b']], cwd=tmp_path)


def test_command_writes_table_json_and_figure(tmp_path):
    done = _run(tmp_path, '--edges', '10,20', '--labels', 'base,good',
                '--json', 'by.json', '--png', 'by.png')
    assert done.returncode == 0, done.stderr
    assert '| 21+ | 1 |' in done.stdout and '+' in done.stdout.splitlines()[-1]
    with open(str(tmp_path / 'by.json')) as f:
        assert json.load(f)['labels'] == ['base', 'good']
    assert os.path.getsize(str(tmp_path / 'by.png')) > 1000


def test_bad_edges_and_labels_are_one_line(tmp_path):
    for args, word in ((('--edges', '20,10'), '--edges'), (('--labels', 'one'), '--labels')):
        done = _run(tmp_path, *args)
        assert done.returncode == 2 and word in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 3   # argparse's usage + one line
