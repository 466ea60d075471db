"""Every number in the README's results must be traceable to the `outputs/` file it cites.

The results in README.md are written by hand and drift from what the runs wrote under `outputs/`. This test reads the
section `## Current results ...` (and the paragraphs of `## Two commands` that cite `outputs/`) and splits it into
blocks: a block starts at a paragraph that begins with `**Title**` and runs to the next such paragraph (the section's
intro is its own block). A block's sources are the backticked paths in it under `outputs/` (`outputs/` alone is no
citation): a file, or a folder meaning every .md/.json/.csv file in it (files over 5 MB are skipped; .jsonl and .ipynb
are never read).

Which numbers count: integers and decimals, with optional thousands commas (`3,000`) or an exponent (`3.2e-15`), a
`%` or `x` after them (`24.7x`), or `k` for thousands (`17k`). Not counted: text inside `code` spans (commands,
identifiers), the phrase "95% CI", version strings with two dots (`0.1.1`), and digits that are part of a name or
label: directly after a letter, `_`, `@` or `word(` (`Qwen2.5`, `Hits@1`, `KB-Coder(6)`), directly before a letter
(`1.5B`, `34B`), or MetaQA's `1-hop`/`2-hop`/`3-hop` and the `1-N` of 1-N scoring. `3,650-token` or `25-minute`
do count. Sample sizes count too (`n = 36`): they are in the files.

A README number with d decimals is traced when some number in its sources rounds to it at d decimals (either rounding
direction of a tie); a source fraction times 100 also counts (fractions shown as percent); `17k` means a source number
within 500 of 17,000. Figures from the papers and the literature are listed in QUOTED with their source, fixed
settings that no cited file records in SETTINGS with a reason; both must still occur in the README. A derived figure
(a ratio, a difference) that no file holds is a failure: write it into an output, or drop it from the README.
"""
import re
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT/'README.md'
SECTION = '## Current results (measured on the project\'s 2-core CPU machines)'
MAX_BYTES = 5_000_000

QUOTED = {  # figures that are not ours: README number -> where it comes from (seed texts: ../shared/seeds/)
    '70.56': 'CodeAlignKGQA paper, Table 3: KQA Pro Hits@1 with CodeLlama-34B Instruct',
    '2.84': 'CodeAlignKGQA paper, Table 3: KQA Pro SER % with CodeLlama-34B Instruct',
    '0.984': 'CodeAlignKGQA paper, Table 7: MetaQA facts-extraction relation precision at θ = 0.5',
    '0.613': 'CodeAlignKGQA paper, Table 7: MetaQA facts-extraction relation recall at θ = 0.5',
    '99.6': 'CodeAlignKGQA paper, Table 4: MetaQA 1-hop Hits@1 with CodeLlama-34B Instruct',
    '99.8': 'CodeAlignKGQA paper, Table 4: MetaQA 2-hop Hits@1 with CodeLlama-34B Instruct',
    '99.7': 'CodeAlignKGQA paper, Table 4: MetaQA 3-hop Hits@1 with CodeLlama-34B Instruct',
    '0.894': 'ConvE paper (Dettmers et al. 2018), ComplEx row: UMLS test MRR (nbs: LITERATURE_MRR)',
    '0.823': 'ConvE paper (Dettmers et al. 2018), ComplEx row: Kinships test MRR (nbs: LITERATURE_MRR)',
    '0.60': 'PyKEEN benchmarking study (github.com/pykeen/benchmarking, ablation/results/complex/kinships, '
            'hpo_complex_kinships_lcwa_adam, best pipeline): Kinships test MRR 0.603',
    '62.54': 'NS-KGQA paper, Table 5: MetaQA 1-hop Hits@1 on test',
    '64.19': 'NS-KGQA paper, Table 5: MetaQA 2-hop Hits@1 on test',
    '60.32': 'NS-KGQA paper, Table 5: MetaQA 3-hop Hits@1 on test',
}
SETTINGS = {  # fixed settings (dimensions, epochs, θ, sizes) that the cited files do not record: number -> why true
}  # none needed now: every setting the results section states is in its cited file

NUMBER = re.compile(r'(?<![\w@.])(?<!\w\()(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*(?:e-\d+)?)([%xk]?)'
                    r'(?!\w|\.\d|-hop\b|-N\b)')
SOURCE_NUMBER = re.compile(r'\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
SOURCE_THOUSANDS = re.compile(r'\d{1,3}(?:,\d{3})+(?:\.\d+)?')  # `3,000` in .md tables
PATH = re.compile(r'`(outputs/[^`\s]+)`')  # `outputs/` alone (all of it) is no citation


def paragraphs(text: str) -> list[str]: return [p.strip() for p in re.split(r'\n\s*\n', text) if p.strip()]


def blocks() -> list[tuple[str, str]]:
    "(title, text) for each `## Two commands` paragraph that cites outputs/, then each block of the results section."
    text = README.read_text(encoding='utf-8')
    assert SECTION in text, f'README has no section {SECTION!r}'
    two = text.split('## Two commands', 1)[1].split('\n## ', 1)[0]
    results = []
    for p in paragraphs(text.split(SECTION, 1)[1]):
        title = re.match(r'\*\*(.+?)\*\*', p)
        if title or not results: results.append([title[1] if title else 'intro', p])
        else: results[-1][1] += '\n\n' + p
    return [('Two commands', p) for p in paragraphs(two) if PATH.search(p)] + [(t, b) for t, b in results]


def readme_numbers(text: str) -> list[str]:
    "The numbers a block states, as written (commas removed), with a `k` kept for thousands."
    text = re.sub(r'`[^`]*`', ' ', text.replace('95% CI', ' '))
    return [n.replace(',', '') + (suffix if suffix == 'k' else '') for n, suffix in NUMBER.findall(text)
            if n.count('.') < 2]


def source_files(block: str) -> list[Path]:
    files = []
    for rel in PATH.findall(block):
        p = ROOT/rel
        assert p.exists(), f'cited path {rel} does not exist'
        found = [p] if p.is_file() else sorted(f for f in p.rglob('*') if f.suffix in ('.md', '.json', '.csv'))
        files += [f for f in found if f.suffix not in ('.jsonl', '.ipynb') and f.stat().st_size <= MAX_BYTES]
    return files


def source_numbers(files: list[Path]) -> set[Decimal]:
    "Every number in the files, plain (`0.9447`, `3.17e-15`) or with thousands commas, and each times 100."
    nums = set()
    for f in files:
        text = f.read_text(encoding='utf-8', errors='replace')
        for n in SOURCE_NUMBER.findall(text) + [n.replace(',', '') for n in SOURCE_THOUSANDS.findall(text)]:
            nums |= {Decimal(n), Decimal(n)*100}
    return nums


def traced(number: str, sources: set[Decimal]) -> bool:
    "Some source number rounds to `number` at its last shown digit (`k`: to the thousand)."
    value = Decimal(number.removesuffix('k'))*(1000 if number.endswith('k') else 1)
    tol = Decimal(500) if number.endswith('k') else Decimal(5).scaleb(value.as_tuple().exponent - 1)
    return any(abs(x - value) <= tol for x in sources)


def untraced() -> dict[str, list[str]]:
    "Block title -> the numbers it states that neither its sources nor QUOTED/SETTINGS account for."
    bad = {}
    for title, text in blocks():
        nums = [n for n in dict.fromkeys(readme_numbers(text)) if n not in QUOTED and n not in SETTINGS]
        files = source_files(text)
        if nums and not files: bad[title] = ['(no outputs/ source cited)'] + nums
        elif nums:
            sources = source_numbers(files)
            if missing := [n for n in nums if not traced(n, sources)]: bad[title] = missing
    return bad


def test_every_readme_number_is_in_its_cited_output():
    bad = untraced()
    assert not bad, 'README numbers not found in the outputs/ files their block cites:\n' + '\n'.join(
        f'  {title}: {", ".join(nums)}' for title, nums in bad.items())


def test_quoted_and_settings_numbers_still_occur():
    stated = {n for _, text in blocks() for n in readme_numbers(text)}
    dead = sorted(set(QUOTED) - stated) + sorted(set(SETTINGS) - stated)
    assert not dead, f'QUOTED/SETTINGS entries no longer in the README (remove them): {dead}'


def test_number_rules(tmp_path):
    assert readme_numbers('Qwen2.5-Coder-1.5B, 34B, 3-hop, Hits@1, KB-Coder(6), `kopl-engine` 0.1.1, `MAIN_N=12`') == []
    assert readme_numbers('3,000 programs, 24.7x, 98 / 94 / 92%, (95% CI 91.5-96.7), 17k, 26-62%, p = 3.2e-15.') == [
        '3000', '24.7', '98', '94', '92', '91.5', '96.7', '17k', '26', '62', '3.2e-15']
    (tmp_path/'m.csv').write_text('mrr,n,p\n0.9447,"17,183",3.17e-15\n', encoding='utf-8')
    src = source_numbers([tmp_path/'m.csv'])
    assert all(traced(n, src) for n in ('0.945', '94.5', '94', '17183', '17k', '3.2e-15'))
    assert not any(traced(n, src) for n in ('0.95', '20k', '3.1e-15', '94.4'))
