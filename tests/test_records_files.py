"""JSONL records files (kgqa_nb.core): only a torn last line is skipped; any other bad line is an error naming the file
and the line."""
import json

import pytest

from kgqa_nb.core import JSONLError, KGQAError, open_jsonl_append, read_jsonl


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
