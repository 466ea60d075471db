"""JSONL records files, plain or gzip (kgqa_nb.core): only a torn last line (or member) is skipped; any other bad
line (or member) is an error naming the file and the line (or byte)."""
import json

import pytest

from kgqa_nb.core import JSONLError, KGQAError, gzip_complete_members, open_jsonl_append, read_jsonl


def test_torn_last_line_is_skipped(tmp_path):
    f = tmp_path/'r.jsonl'
    f.write_text('{"id": 1}\n{"id": 2}\n{"id": 3, "tor', encoding='utf-8')
    assert [r['id'] for r in read_jsonl(f)] == [1, 2]
    f.write_bytes(b'{"id": 1}\n{"name": "\xc3')  # cut inside a UTF-8 character
    assert [r['id'] for r in read_jsonl(f)] == [1]
    f.write_text('{"id": 1}', encoding='utf-8')  # a whole record whose newline never came
    assert [r['id'] for r in read_jsonl(f)] == [1]
    assert list(read_jsonl(tmp_path/'missing.jsonl')) == []


@pytest.mark.parametrize('text, line', [
    ('{"id": 1}\n{"id": 2, "tor\n{"id": 3}\n', 2),  # a bad line in the middle
    ('{"id": 1}\n{"id": 2, "tor\n', 2),  # a bad last line that ends with a newline: written whole, not torn
    ('not json\n{"id": 2}', 1),
])
def test_any_other_bad_line_is_an_error(tmp_path, text, line):
    f = tmp_path/'r.jsonl'
    f.write_text(text, encoding='utf-8')
    with pytest.raises(JSONLError) as e: list(read_jsonl(f))
    assert f'{f}:{line}:' in str(e.value) and isinstance(e.value, (KGQAError, ValueError))


def test_lines_are_split_on_newlines_only(tmp_path):
    f = tmp_path/'r.jsonl'
    recs = [{'id': 1, 'text': 'line\u2028separator'}, {'id': 2, 'text': 'next\x85line'}]
    f.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in recs) + '\n', encoding='utf-8')
    assert list(read_jsonl(f)) == recs


def test_append_after_a_kill_mends_the_torn_line(tmp_path):
    f = tmp_path/'sub'/'r.jsonl'
    with open_jsonl_append(f) as out: out.write('{"id": 1}\n{"id": 2, "to')
    with open_jsonl_append(f) as out: out.write('{"id": 2}\n')
    assert [r['id'] for r in read_jsonl(f)] == [1, 2] and f.read_text().splitlines() == ['{"id": 1}', '{"id": 2}']
    f.write_text('{"id": 1}', encoding='utf-8')
    with open_jsonl_append(f) as out: out.write('{"id": 2}\n')
    assert [r['id'] for r in read_jsonl(f)] == [1, 2]


def test_gz_records_round_trip_and_read_as_one_stream(tmp_path):
    import gzip
    f = tmp_path/'r.jsonl.gz'
    recs = [{'id': i, 'text': 'é\u2028'} for i in range(3)]
    for r in recs:  # three runs, one record each: one member per write
        with open_jsonl_append(f) as out: out.write(json.dumps(r, ensure_ascii=False) + '\n'); out.flush()
    assert list(read_jsonl(f)) == recs
    with gzip.open(f, 'rt', encoding='utf-8') as g: assert [json.loads(l) for l in g] == recs  # zcat reads it too


@pytest.mark.parametrize('cut', [1, 5, 20])  # inside the magic, the header, the deflate data or trailer
def test_gz_torn_member_is_skipped_then_cut_off(tmp_path, cut):
    import gzip
    f = tmp_path/'r.jsonl.gz'
    with open_jsonl_append(f) as out: out.write('{"id": 1}\n')
    whole = f.stat().st_size
    f.write_bytes(f.read_bytes() + gzip.compress(b'{"id": 2}\n')[:cut])
    assert [r['id'] for r in read_jsonl(f)] == [1]
    with open_jsonl_append(f) as out: out.write('{"id": 2}\n')
    assert [r['id'] for r in read_jsonl(f)] == [1, 2] and gzip_complete_members(f.read_bytes())[1] > whole


def test_gz_that_is_not_gzip_is_an_error_and_is_kept(tmp_path):
    f = tmp_path/'r.jsonl.gz'
    f.write_bytes(b'{"id": 1}\n')
    with pytest.raises(JSONLError, match='not gzip data at byte 0'): list(read_jsonl(f))
    with pytest.raises(JSONLError): open_jsonl_append(f)
    assert f.read_bytes() == b'{"id": 1}\n'  # never cut to nothing
